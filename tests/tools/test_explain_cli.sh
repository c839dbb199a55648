#!/bin/sh
# dtensor-explain as users run it: --op prints dispatch's strategy and the inputs' plans;
# --cases names a wrong row and exits 1; --plugin makes a shared object's ops reachable;
# --train-mesh explains one rank's training step.
# usage: test_explain_cli.sh DTENSOR_EXPLAIN PLUGIN_SO SOURCE_DIR
set -u
explain=$1 plugin=$2 src=$3
out=$(mktemp) && trap 'rm -f "$out"' EXIT
fails=0

# expect RC PATTERN... -- ARGS: runs the tool with ARGS; its exit status must be RC and its
# output (stdout and stderr) must hold every fixed-string PATTERN.
expect() {
    rc=$1; shift
    n=0
    while [ "$1" != "--" ]; do n=$((n + 1)); eval "p$n=\$1"; shift; done
    shift
    "$explain" "$@" >"$out" 2>&1
    got=$?
    ok=1
    [ "$got" -eq "$rc" ] || { echo "FAIL: exit $got, expected $rc: $*"; ok=0; }
    i=1
    while [ $i -le $n ]; do
        eval "p=\$p$i"
        grep -qF -- "$p" "$out" || { echo "FAIL: no \"$p\" in the output of: $*"; ok=0; }
        i=$((i + 1))
    done
    if [ $ok -eq 0 ]; then
        sed 's/^/    | /' "$out"
        fails=$((fails + 1))
    else
        echo "ok: $*"
    fi
}

expect 0 "mm on mesh 4" "strategy: S(0) | R -> S(0)" "input 1 stays R" \
    -- --op mm --mesh 4 --shapes '12,8;8,16' --placements 'S(0);R'
expect 0 "strategy: S(1) | S(0) -> P(sum)" "input 1 is redistributed to S(0):" \
    "1. all_to_all     d0 " -- --op mm --mesh 4 --shapes '12,8;8,16' --placements 'S(1);S(1)'
expect 0 "mean on mesh dp=2 x tp=2" "-> P(avg),R" \
    -- --op 'mean(dim=0)' --mesh dp=2,tp=2 --shapes '8,6' --placements 'S(0),R'
expect 0 "redistribute f32[8,8] on mesh dp=2 x tp=2: S(0),S(0) -> S(1),S(1)" \
    -- --mesh dp=2,tp=2 --shape 8,8 --from 'S(0),S(0)' --to 'S(1),S(1)'
# Across meshes: 2x2 S(0),S(0) -> 4 S(0) over the same ranks keeps every block in place; a
# pipeline hand-off sends each box once; a wrong rank list is named.
expect 0 "across meshes: 2x2 (ranks 0-3) S(0),S(0) -> 4 (ranks 0-3) S(0)" "rank 1 keeps" \
    "total: 0 messages" -- --mesh 2x2 --to-mesh 4 --shape 8,6 --from 'S(0),S(0)' --to 'S(0)'
expect 0 "tp=2 (ranks 0,1) S(0) -> tp=2 (ranks 2,3) S(1)" "rank 1 -> rank 3" "[3:5,2:3]" \
    "total: 4 messages" -- --mesh tp=2 --ranks 0,1 --to-ranks 2,3 --shape 5,3 --from 'S(0)' \
    --to 'S(1)'
expect 1 "--to-ranks \"2\" must list the 2 world ranks" \
    -- --mesh tp=2 --to-ranks 2 --shape 5,3 --from 'S(0)' --to 'S(1)'
expect 1 "op \"no_such_op\" is neither built in nor registered" \
    -- --op 'no_such_op(dim=0)' --mesh 4 --shapes '8' --placements 'R'
expect 1 "softmax needs dim=K" -- --op softmax --mesh 4 --shapes '8' --placements 'R'

# Every call a row can name reads as its C call: t of a 1-D tensor is that tensor (dt_t), a 3-D
# one an error; broadcast_to is expand; torch's normalized_shape is last=K; calls that are not
# one op (unbind, the like-factories, new_full, composites) are run on local ranks, and std
# gathers its sharded reduced dim once instead of reducing twice.
expect 0 "t on mesh 4: the input as is (dt_t of a 1-D tensor)" "output: f32[8] S(0)" \
    "total: 0 collectives" -- --op t --mesh 4 --shapes 8 --placements 'S(0)'
expect 0 "transpose on mesh 4" "strategy: P(sum) -> P(sum)" \
    -- --op t --mesh 4 --shapes 8,4 --placements 'P(sum)'
expect 1 "t expects a tensor of at most 2 dims, got 3-D" \
    -- --op t --mesh 4 --shapes 8,4,2 --placements 'R'
expect 0 "expand on mesh 4" "strategy: S(0) -> S(1)" \
    -- --op 'broadcast_to(3,5,4)' --mesh 4 --shapes '5,1' --placements 'S(0)'
expect 0 "strategy: S(0) | R | R -> S(0)" "input 0 is redistributed to S(0):" \
    -- --op 'layer_norm(normalized_shape=[8,10])' --mesh 4 --shapes '8,8,10;8,10;8,10' \
    --placements 'S(1);R;R'
expect 1 "cannot read the argument \"last2\" (the last K dims: last=K or normalized_shape=[..])" \
    -- --op 'layer_norm(last2)' --mesh 4 --shapes '8,8,10' --placements 'S(1)'
expect 1 "normalized_shape [8,9] is not input 0's last sizes" \
    -- --op 'layer_norm(normalized_shape=[8,9])' --mesh 4 --shapes '8,8,10' --placements 'S(1)'
expect 0 "unbind(dim=0) on mesh 4: not one dispatched op" "output: f32[6] S(0) (each of 8 outputs)" \
    "collectives: all_to_all[dim0]" -- --op 'unbind(dim=0)' --mesh 4 --shapes 8,6 --placements 'S(0)'
expect 0 "output: f32[8,6] R,S(1)" "total: 0 collectives" \
    -- --op ones_like --mesh 2x2 --shapes 8,6 --placements 'P(sum),S(1)'
expect 0 "new_full(shape=[4,4],value=1) on mesh 4" "output: f32[4,4] R" \
    -- --op 'new_full(shape=[4,4],value=1)' --mesh 4 --shapes 8,6 --placements 'S(0)'
expect 1 "new_full needs shape=[..] and value=V" \
    -- --op 'new_full(value=1)' --mesh 4 --shapes 8,6 --placements 'S(0)'
expect 0 "std(dim=1,correction=1) on mesh 2x2" "output: f32[2] S(0),R" \
    "collectives: all_gather[dim1]" "total: 1 collective" \
    -- --op 'std(dim=1)' --mesh 2x2 --shapes 2,4 --placements 'S(0),S(1)'

# The conformance rows pass; a wrong row is named with its file and line, and fails the run.
expect 0 "P002 mm: pass" "F01 t: pass" "F04 unbind(dim=0): pass" "F14 std(dim=1): pass" \
    "P092 cross_entropy(mean): pass" "0 differ, 0 skipped, 0 errors" \
    -- --cases "$src/tests/conformance/propagation_cases.tsv"
expect 1 "W001 mm: pass" \
    "explain_wrong_rows.tsv:6: W002 mm (S(1) ; S(1) on 4): differs: got P(sum) with all_to_all[dim0], expected S(1) with none" \
    "3 rows: 2 pass, 1 differ, 0 skipped, 0 errors" -- --cases "$src/tests/tools/explain_wrong_rows.tsv"
# The wrong table (redistribute rows) is named as such, exit 2.
expect 2 "lacks the column(s) op, input_shapes, input_placements" \
    -- --cases "$src/tests/conformance/redistribute_cases.tsv"

# A table that cannot be used is an error naming it (exit 2), never a summary of unset totals.
empty=$(mktemp) && trap 'rm -f "$out" "$empty"' EXIT
expect 2 "/nonexistent/rows.tsv: cannot open it" -- --cases /nonexistent/rows.tsv
expect 2 "$src/tests: cannot read it: Is a directory" -- --cases "$src/tests"
expect 2 "$empty: no header row" -- --cases "$empty"
head -4 "$src/tests/tools/explain_wrong_rows.tsv" >"$empty"
expect 2 "$empty:4: the table has a header row but no rows" -- --cases "$empty"

# A plugin's ops: explained, and its rows checked; without it they are skipped (--strict: fail).
expect 0 "scale_rows on mesh 4" "strategy: S(1) | R -> S(1)" "all_gather" \
    -- --plugin "$plugin" --op scale_rows --mesh 4 --shapes '8,6;8' --placements 'S(1);S(0)'
expect 0 "E01 scale_rows: pass" "E07 softsign: pass" "7 rows: 7 pass, 0 differ" \
    -- --plugin "$plugin" --cases "$src/examples/explain_plugin.tsv"
expect 0 "E01 scale_rows: skipped: op \"scale_rows\" is neither built in nor registered" \
    -- --cases "$src/examples/explain_plugin.tsv"
expect 1 "skipped (an error with --strict)" -- --strict --cases "$src/examples/explain_plugin.tsv"
expect 1 "--plugin /nonexistent/libx.so" -- --plugin /nonexistent/libx.so --op mm --mesh 4 \
    --shapes '2,2;2,2' --placements 'R;R'
libm=$(ldd "$explain" | awk '/libm\.so/ {print $3; exit}')
[ -n "$libm" ] && expect 1 "defines no dt_plugin_register()" -- --plugin "$libm" --cases x

# A rank's training step (--train-mesh): every section, the JSON written, bad flags named.
small="--layers 1 --dim 32 --heads 2 --kv-heads 1 --hidden 32 --seq 16 --batch 4"
json=$(mktemp) && trap 'rm -f "$out" "$json"' EXIT
expect 0 "rank 3 of 4 on mesh dp=2,tp=2: dp 1 tp 1" "layers.0.attention.wq.weight" \
    "layers.0.attention" "forward  all_gather     on tp" "step totals" \
    "layers.0.feed_forward                input  S(1) -> R" \
    -- --train-mesh dp=2,tp=2 --rank 3 $small --json "$json"
grep -qF '"totals"' "$json" || { echo "FAIL: no totals in the --json file"; fails=$((fails + 1)); }
expect 0 "pipeline: stage 1 of 2" "recv_act  micro 0 from stage 0" "(activations freed)" \
    "expert parallel" -- --mesh pp=2,ep=2 --train-mesh pp=2,ep=2 --rank 2 --experts 2 \
    --top-k 1 --micro 2 $small
expect 0 "forward  step 1: queries see the K/V of cp rank 0 (world 0), positions 0-3, 12-15" \
    -- --train-mesh cp=2 --rank 1 $small
expect 1 "rank 4 is not in [0, 4)" -- --train-mesh dp=4 --rank 4 $small
expect 2 "bad argument --bogus" -- --train-mesh dp=2 --bogus 1

[ $fails -eq 0 ] && echo "all dtensor-explain checks passed"
exit $((fails != 0))
