#!/bin/sh
# Every shipped config of make train (examples/configs/*.json) trains: 3 steps of each, with
# every step's loss equal to one rank's (the same file with the mesh overridden to one rank:
# "1", or "ep=1" for the MoE model) within 1e-5 relative; the run prints its parallel layout.
# Then the config's front door: --help exits 0 listing the keys, and a bad key, value, file or
# mesh fails with exit 2 and a message naming it.
# A model of one's own (examples/my_llama.c: the same Llama in 58 lines on the trainer, its
# plan and FSDP units from my_llama.json) trains with the losses of tiny_llama on one rank.
# Usage: test_train_configs.sh TRAIN CONFIG_DIR MY_LLAMA
set -e
train=$1 dir=$2 my_llama=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
quick="--training.steps 3 --metrics.trace_steps 0 --metrics.loss_digits 8"
losses() { grep '^step' "$1" | awk '{print $4}'; }
n=0
for cfg in "$dir"/*.json; do
    name=$(basename "$cfg" .json)
    one=1
    grep -q '"experts": *[1-9]' "$cfg" && one=ep=1
    # shellcheck disable=SC2086
    "$train" "$cfg" $quick --metrics.trace_out "$tmp/$name" > "$tmp/$name.txt" 2>&1 ||
        { cat "$tmp/$name.txt"; fail "$name did not train"; }
    # shellcheck disable=SC2086
    "$train" "$cfg" $quick --parallelism.mesh $one --metrics.trace_out "$tmp/$name.one" \
        > "$tmp/$name.one.txt" 2>&1 || { cat "$tmp/$name.one.txt"; fail "$name on one rank"; }
    grep -q '^parallel layout: mesh' "$tmp/$name.txt" || fail "$name printed no layout table"
    losses "$tmp/$name.txt" > "$tmp/a"
    losses "$tmp/$name.one.txt" > "$tmp/b"
    [ "$(wc -l < "$tmp/a")" -eq 3 ] && [ "$(wc -l < "$tmp/b")" -eq 3 ] ||
        { cat "$tmp/$name.txt" "$tmp/$name.one.txt"; fail "$name: expected 3 steps from each run"; }
    paste "$tmp/a" "$tmp/b" | awk -v n="$name" '{
        d = $1 - $2; if (d < 0) d = -d; a = $2 < 0 ? -$2 : $2
        if (!(d <= 1e-5 * a)) { printf "%s step %d: loss %s, one rank %s\n", n, NR, $1, $2; bad = 1 }
    } END { exit bad }' || fail "$name: losses differ from one rank's"
    echo "$name: $(head -1 "$tmp/$name.txt" | sed 's/.*ranks as //') -- losses $(tr '\n' ' ' < "$tmp/a")equal one rank's"
    n=$((n + 1))
done
[ "$n" -ge 7 ] || fail "only $n configs in $dir"

# The training loop's knobs against one rank's: clipping by the global norm (over pipeline
# stages too: each stage holds its own gradients), warmup + cosine schedule, eval of held-out
# batches (under a pipeline too), and gradient accumulation (2 batches of 4 are the samples
# of one batch of 8, 4 eval batches of 4 those of 2 of 8: the same curve). Step losses, eval
# losses and gradient norms compared.
curve() { grep -E '^(step|eval)' "$1" | sed 's/grad norm//' | awk '{print $1, $2, $4, $NF}'; }
knobs="--training.steps 4 --metrics.trace_steps 0 --metrics.loss_digits 8 --metrics.layout 0
       --training.max_norm 0.5 --lr_scheduler.warmup_steps 1 --lr_scheduler.decay_steps 3
       --eval.every 2"
for run in "dp2_pp2_tp2.json" "fsdp2_tp2_sp.json" \
           "default.json --training.batch 4 --training.grad_accum 2 --eval.batches 4"; do
    # shellcheck disable=SC2086
    "$train" "$dir"/$run $knobs > "$tmp/k.txt" 2>&1 || { cat "$tmp/k.txt"; fail "$run"; }
    # shellcheck disable=SC2086
    "$train" "$dir/$(echo $run | cut -d' ' -f1)" --parallelism.mesh 1 $knobs > "$tmp/k1.txt" 2>&1 ||
        { cat "$tmp/k1.txt"; fail "$run on one rank"; }
    curve "$tmp/k.txt" > "$tmp/a"
    curve "$tmp/k1.txt" > "$tmp/b"
    [ "$(grep -c '^step' "$tmp/a")" -eq 4 ] && [ "$(grep -c '^eval' "$tmp/a")" -eq 2 ] &&
        [ "$(wc -l < "$tmp/b")" -eq 6 ] || { cat "$tmp/k.txt" "$tmp/k1.txt"; fail "$run: lines"; }
    paste "$tmp/a" "$tmp/b" | awk -v n="$run" '{
        for (i = 3; i <= 4; i++) { d = $i - $(i + 4); if (d < 0) d = -d; a = $(i + 4); if (a < 0) a = -a
            if ($1 != $5 || !(d <= 1e-5 * a)) { printf "%s: %s, one rank: %s\n", n, $0, $5; bad = 1 } }
    } END { exit bad }' || fail "$run: the knobs' curve differs from one rank's"
    echo "$run with clipping, schedule and eval: $(grep -c . "$tmp/a") lines equal one rank's"
done

# torchtitan's next switches from the config: interleaved 1F1B (2 chunks per rank), async TP's
# collective matmuls, measured activation checkpointing: one rank's losses within 1e-5; float8
# linears within 1% of one rank's f32 losses over 3 steps (e4m3 rounds weights and activations
# to 3 mantissa bits: torchao reports float8 curves within about 1% of bf16's).
four="$quick --model.layers 4"
for run in "--parallelism.mesh dp_shard=2,pp=2 --parallelism.fsdp 0 --schedule interleaved_1f1b --virtual 2:1e-5" \
           "--parallelism.mesh dp_shard=2,tp=2 --async-tp ordered:1e-5" \
           "--parallelism.mesh dp_shard=2,tp=2 --ac measured --activation_checkpoint.budget_kib 512:1e-5" \
           "--parallelism.mesh dp_shard=2,tp=2 --float8 1:1e-2"; do
    flags=${run%:*} tol=${run##*:}
    # shellcheck disable=SC2086
    "$train" "$dir/default.json" $four $flags > "$tmp/f.txt" 2>&1 || { cat "$tmp/f.txt"; fail "$flags"; }
    # shellcheck disable=SC2086
    "$train" "$dir/default.json" $four --parallelism.mesh 1 > "$tmp/f1.txt" 2>&1 ||
        { cat "$tmp/f1.txt"; fail "one rank"; }
    losses "$tmp/f.txt" > "$tmp/a"
    losses "$tmp/f1.txt" > "$tmp/b"
    paste "$tmp/a" "$tmp/b" | awk -v n="$flags" -v t="$tol" '{ d = $1 - $2; if (d < 0) d = -d
        if (!(d <= t * $2)) { printf "%s step %d: %s, one rank %s\n", n, NR, $1, $2; bad = 1 }
    } END { exit bad || NR != 3 }' || fail "$flags: losses beyond $tol of one rank's"
    echo "$flags: $(tr '\n' ' ' < "$tmp/a")within $tol of one rank's"
done

# shellcheck disable=SC2086
"$my_llama" "$dir/my_llama.json" $quick > "$tmp/mine.txt" 2>&1 || { cat "$tmp/mine.txt"; fail "my_llama"; }
# shellcheck disable=SC2086
"$train" "$dir/my_llama.json" $quick --parallelism.mesh 1 > "$tmp/one.txt" 2>&1 ||
    { cat "$tmp/one.txt"; fail "tiny_llama on one rank"; }
grep -q 'training my_llama on' "$tmp/mine.txt" || fail "my_llama did not run its own model"
losses "$tmp/mine.txt" > "$tmp/a"
losses "$tmp/one.txt" > "$tmp/b"
paste "$tmp/a" "$tmp/b" | awk '{ d = $1 - $2; if (d < 0) d = -d
    if (!(d <= 1e-5 * $2)) { printf "my_llama step %d: %s, tiny_llama on one rank %s\n", NR, $1, $2; bad = 1 }
} END { exit bad || NR != 3 }' || fail "my_llama's losses differ from tiny_llama's on one rank"
echo "my_llama (dp_shard=2 x tp=2, FSDP units, plan from the file): $(tr '\n' ' ' < "$tmp/a")equal"

# docs/custom_model.md shows both files as they are
docs=$(dirname "$dir")/../docs/custom_model.md
for pair in "json:$dir/my_llama.json" "c:$(dirname "$dir")/my_llama.c"; do
    awk -v lang="${pair%%:*}" '$0 == "```" lang { on = 1; next } on && $0 == "```" { exit } on' \
        "$docs" > "$tmp/shown"
    cmp -s "$tmp/shown" "${pair#*:}" || fail "docs/custom_model.md does not show ${pair#*:} as it is"
done

"$train" --help > "$tmp/help.txt" || fail "--help exited $?"
grep -q -- '--parallelism.dp_shard' "$tmp/help.txt" || fail "--help lists no keys"
bad() { # bad EXPECTED-TEXT ARGS...: exit 2 and the text in the message
    want=$1; shift
    set +e; "$train" "$@" > "$tmp/bad.txt" 2>&1; rc=$?; set -e
    [ "$rc" -eq 2 ] || { cat "$tmp/bad.txt"; fail "$* exited $rc, want 2"; }
    grep -qF -- "$want" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "$*: no \"$want\""; }
}
bad "unknown flag --training.stepz" --training.stepz 3
bad "training.steps = \"x\": want an integer" --training.steps x
bad "parallelism.pipeline_schedule = \"zigzag\": want afab, 1f1b or interleaved_1f1b" --schedule zigzag
bad "model.experts = 4 needs an ep dim" --model.experts 4
echo '{"training": {"steps": 3, "steps": 4}}' > "$tmp/dup.json"
bad "duplicate" "$tmp/dup.json"
echo '{"training": {"stepz": 3}}' > "$tmp/key.json"
bad "unknown key training.stepz" "$tmp/key.json"
echo '{"training": {"steps": 2.5}}' > "$tmp/type.json"
bad "training.steps = 2.5: want an integer" "$tmp/type.json"
bad "unable to open" "$tmp/missing.json"
bad "microbatches = 3 does not divide training.batch = 8" --parallelism.mesh pp=2 --micro 3
echo '{"parallelism": {"tp": 2, "tp_plan": {"output": "diagonal"}}}' > "$tmp/plan.json"
bad "parallelism.tp_plan.output: style \"diagonal\"" "$tmp/plan.json"
set +e; "$my_llama" --parallelism.mesh cp=2 > "$tmp/bad.txt" 2>&1; rc=$?; set -e
[ "$rc" -ne 0 ] && grep -q "a custom model runs over dp_replicate, dp_shard and tp" "$tmp/bad.txt" ||
    { cat "$tmp/bad.txt"; fail "my_llama on cp=2 exited $rc"; }
echo "front door: --help and 11 bad inputs answered by name"
