#!/bin/sh
# make train's loss parity over UCX: the same small model, data and seed trained 3 steps as 4
# processes under dtrun (dp=2 x tp=2, FSDP units, sequence and loss parallel) and as 4
# in-process ranks of the local runtime; every step's loss equal within 1e-5 relative (the
# collectives' summation order may differ between the runtimes).
# Usage: test_train_ucx.sh DTRUN TRAIN   (exit 77: built without UCX)
set -e
dtrun=$1 train=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args="--steps 3 --dim 32 --layers 1 --heads 4 --kv-heads 2 --hidden 64 --seq 16 --batch 4
      --mesh dp=2,tp=2 --loss-digits 8"
# shellcheck disable=SC2086
"$train" $args --out "$tmp/local" > "$tmp/local.txt"
# shellcheck disable=SC2086
if ! "$dtrun" -n 4 "$train" --ucx 1 $args > "$tmp/ucx.txt" 2>&1; then
    if grep -q "no UCX runtime" "$tmp/ucx.txt"; then exit 77; fi
    cat "$tmp/ucx.txt"
    exit 1
fi
grep '^step' "$tmp/local.txt" | awk '{print $4}' > "$tmp/a"
grep '^\[rank 0\] step' "$tmp/ucx.txt" | awk '{print $6}' > "$tmp/b"
if [ "$(wc -l < "$tmp/a")" -ne 3 ] || [ "$(wc -l < "$tmp/b")" -ne 3 ]; then
    echo "expected 3 steps from each run"; cat "$tmp/local.txt" "$tmp/ucx.txt"; exit 1
fi
paste "$tmp/a" "$tmp/b" | awk '{
    d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1
    if (d > 1e-5 * a) { printf "step %d: local %s, ucx %s\n", NR, $1, $2; bad = 1 }
    else printf "step %d: loss %s (local) %s (ucx)\n", NR, $1, $2
} END { exit bad }'
