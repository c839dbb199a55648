#!/bin/sh
# make train-compare: make train's layouts (examples/configs/), 3 traced steps each, then one
# trace studio page comparing them all: BUILD/train_compare.html (docs/tracing.md).
# Usage: tools/train-compare.sh BUILD [extra train flags...]
set -eu
build=$1
shift
out="$build/train_compare"
mkdir -p "$out"
runs=""
# name  config  flags
while read -r name cfg flags; do
    echo "train-compare: $name ($cfg $flags)"
    # shellcheck disable=SC2086
    "./$build/examples/train" "examples/configs/$cfg" --training.steps 3 --metrics.trace_steps 3 \
        --metrics.trace_out "$out/$name" $flags "$@" > "$out/$name.log" 2>&1 ||
        { cat "$out/$name.log"; echo "train-compare: $name failed"; exit 1; }
    grep '^mean step' "$out/$name.log" || true
    runs="$runs $name=$out/$name.json"
done <<'LAYOUTS'
ddp_dp4 dp4_fsdp.json --parallelism.fsdp 0
fsdp_dp4 dp4_fsdp.json
tp4_sp tp4.json
fsdp2_tp2_sp fsdp2_tp2_sp.json
pp_afab dp2_pp2_tp2.json --parallelism.pipeline_schedule afab
pp_1f1b dp2_pp2_tp2.json --parallelism.pipeline_schedule 1f1b
cp2_tp2 cp2_tp2.json
ep2_moe dp2_ep2_tp2_moe.json
LAYOUTS
# shellcheck disable=SC2086
"./$build/dtensor-trace" studio -o "$build/train_compare.html" $runs
echo "trace studio: $build/train_compare.html"
