#!/bin/sh
# dtensor-explain --train predicts, for every shipped make train config, the collectives a
# real run counts: rank 0's first step explained (a dry run of the trainer's own step on
# in-process ranks, observed through its probe) against train's --metrics.comms table of the
# same step (dt_comm_stats on rank 0), every (kind, group) with its calls and bytes, and the
# count of each of the run's 3 steps (its progress lines) equal to the explained total; and the
# view has every section its layout calls for (a pipeline's actions, the ring's steps, MoE's
# send buckets).
# Usage: test_explain_train_configs.sh DTENSOR_EXPLAIN TRAIN CONFIG_DIR
set -e
explain=$1 train=$2 dir=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
for cfg in "$dir"/*.json; do
    name=$(basename "$cfg" .json)
    "$explain" --train "$cfg" --rank 0 --json "$tmp/$name.json" > "$tmp/$name.txt" 2>&1 ||
        { cat "$tmp/$name.txt"; echo "FAIL: $name: dtensor-explain --train"; exit 1; }
    "$train" "$cfg" --training.steps 3 --metrics.comms 1 --metrics.trace_steps 0 \
        --metrics.layout 0 > "$tmp/$name.run" 2>&1 ||
        { cat "$tmp/$name.run"; echo "FAIL: $name: train"; exit 1; }
    python3 - "$tmp/$name.json" "$tmp/$name.run" "$name" <<'PY' || exit 1
import json, sys
view = json.load(open(sys.argv[1]))
name = sys.argv[3]
want = {(t["kind"], t["group"]): (t["calls"], t["bytes_in"], t["bytes_out"]) for t in view["totals"]}
got, on = {}, False
for line in open(sys.argv[2]):
    if line.startswith("rank 0, step 1:"):
        on = True
    elif on and line.strip().startswith("cache"):
        break
    elif on and not line.strip().startswith("collective"):
        f = line.split()
        got[(f[0], f[1])] = (int(f[3]), int(f[4]), int(f[5]))
if not got:
    sys.exit("FAIL: %s: no collectives table in the run's output" % name)
if want != got:
    for k in sorted(set(want) | set(got)):
        if want.get(k) != got.get(k):
            print("%s: %s over %s: explained %s, counted %s" % (name, k[0], k[1], want.get(k), got.get(k)))
    sys.exit("FAIL: %s: the explained step differs from the counted one" % name)
total = sum(v[0] for v in want.values())
steps = [int(l.split(" collectives")[0].split()[-1]) for l in open(sys.argv[2]) if l.startswith("step ")]
if len(steps) != 3 or any(c != total for c in steps):
    sys.exit("FAIL: %s: steps counted %s collectives, explained %d" % (name, steps, total))
mesh = view["config"]["mesh"]
for dim, section in (("pp=", "pipeline"), ("cp=", "ring"), ("ep=2", "moe")):
    if dim in mesh and section not in view:
        sys.exit("FAIL: %s: mesh %s but no %s section" % (name, mesh, section))
print("%s: %d (kind, group) pairs, %d collectives a step, explained = counted on steps 1-3" %
      (name, len(got), total))
PY
    n=$((n + 1))
done
[ "$n" -ge 7 ] || { echo "FAIL: only $n configs"; exit 1; }
