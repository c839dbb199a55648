#!/bin/sh
# A training run killed with SIGKILL at a random point (in a step, or in a checkpoint's save)
# and started again with the same command resumes from its newest complete checkpoint, and the
# loss of every step from there equals the uninterrupted run's within 1e-6 relative: 20 kills,
# 20 resumes. make train's FSDP x TP x SP config, 20 steps with a checkpoint every 2 (keep_last
# 2); each kill comes up to one step (the reference run's mean step time) after a random step's
# line of steps 1-8, so it lands inside a step or a save, and every rerun has at least 10 steps
# left to compare however fast the machine runs a step.
# Usage: test_train_resume.sh TRAIN CONFIG [ROUNDS]
set -e
train=$1 cfg=$2 rounds=${3:-20}
tmp=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
steps=20
args="--training.steps $steps --metrics.trace_steps 0 --metrics.loss_digits 9 --metrics.layout 0"
# shellcheck disable=SC2086
"$train" "$cfg" $args > "$tmp/ref.txt" 2>&1 || { cat "$tmp/ref.txt"; fail "the reference run"; }
grep '^step' "$tmp/ref.txt" | awk '{split($2, s, "/"); print s[1], $4}' > "$tmp/ref"
[ "$(wc -l < "$tmp/ref")" -eq "$steps" ] || { cat "$tmp/ref.txt"; fail "reference: want $steps steps"; }
# One step, in ms (at least 1): how long after a step's line a kill may come.
step_ms=$(sed -n 's/^mean step \([0-9]*\).*/\1/p' "$tmp/ref.txt")
step_ms=$(( ${step_ms:-0} > 0 ? ${step_ms:-0} : 1 ))
rand() { od -An -N2 -tu2 /dev/urandom | tr -d ' '; }
r=0 resumed=0
while [ "$r" -lt "$rounds" ]; do
    r=$((r + 1))
    ck="$tmp/ck$r"
    run="$train $cfg $args --checkpoint.folder $ck --checkpoint.every 2 --checkpoint.keep_last 2"
    at=$(( $(rand) % 8 + 1 ))        # the step whose line is awaited
    delay=$(( $(rand) % step_ms ))   # then this many ms more
    # shellcheck disable=SC2086
    $run > "$tmp/killed.txt" 2>&1 &
    pid=$!
    i=0
    until grep -q "^step *$at/" "$tmp/killed.txt" 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || break
        i=$((i + 1)); [ "$i" -lt 3000 ] || fail "round $r: no step $at in 30 s"
        sleep 0.01
    done
    sleep "$(awk -v d="$delay" 'BEGIN { printf "%.3f", d / 1000 }')"
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=
    # shellcheck disable=SC2086
    $run > "$tmp/resumed.txt" 2>&1 || { cat "$tmp/resumed.txt"; fail "round $r: the rerun failed"; }
    from=$(sed -n 's/^resumed from .* at step \([0-9]*\).*/\1/p' "$tmp/resumed.txt")
    from=${from:-0}
    [ "$from" -gt 0 ] && resumed=$((resumed + 1))
    grep '^step' "$tmp/resumed.txt" | awk '{split($2, s, "/"); print s[1], $4}' > "$tmp/got"
    [ "$from" -lt "$steps" ] || { cat "$tmp/killed.txt"; fail "round $r: the kill came after the run"; }
    [ "$(wc -l < "$tmp/got")" -eq $((steps - from)) ] ||
        { cat "$tmp/resumed.txt"; fail "round $r: resumed at $from, want steps $((from + 1))..$steps"; }
    awk -v r="$r" 'NR == FNR { want[$1] = $2; next } {
        d = $2 - want[$1]; if (d < 0) d = -d; a = want[$1] < 0 ? -want[$1] : want[$1]
        if (!($1 in want) || !(d <= 1e-6 * a)) {
            printf "round %d step %d: loss %s, uninterrupted %s\n", r, $1, $2, want[$1]; bad = 1 }
    } END { exit bad }' "$tmp/ref" "$tmp/got" || fail "round $r: the curve does not continue"
    echo "round $r: killed $delay ms after step $at's line, resumed at step $from, steps $((from + 1))..$steps equal"
    rm -rf "$ck"
done
[ "$resumed" -ge $((rounds / 2)) ] || fail "only $resumed of $rounds rounds resumed from a checkpoint"
echo "$rounds kills, $rounds resumes ($resumed from a checkpoint, the rest from the start)"
