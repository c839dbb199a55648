"""dtensor-trace-torch on traces PyTorch wrote (fixtures/torch_trace), checked against this
script's own reading of the raw torch JSON: steps and their spans, top-level ops by name, the
collectives of each rank and step by kind and bytes (read here from the _c10d_functional
callers' shapes, not from what the converter reads), ids, lanes, deps and seq across ranks;
then a record_param_comms (NCCL-style) trace, bad inputs and randomly damaged traces (seeded).

    python3 test_torch_trace.py DTENSOR_TRACE_TORCH FIXTURE_DIR
"""
import collections
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile

ESIZE = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "int": 4,
         "Float": 4, "BFloat16": 2}
LANES = {0, 1, 2, 4, 5}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def numel(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def convert(tool, inputs, out):
    return subprocess.run([tool, "-o", out] + inputs, capture_output=True, text=True)


class Raw:
    """One rank's torch trace as this test reads it."""

    def __init__(self, path):
        d = load(path)
        self.rank = d["distributedInfo"]["rank"]
        ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
        self.steps = {int(e["name"][13:]): e for e in ev if e["name"].startswith("ProfilerStep#")}
        main = next(iter(self.steps.values()))["tid"]
        self.cpu = sorted((e for e in ev if e.get("cat") == "cpu_op" and e["tid"] == main),
                          key=lambda e: (e["ts"], -e["dur"]))
        self.frames = sorted((e for e in ev if e.get("cat") == "python_function"
                              and e["name"].startswith("nn.Module: ")),
                             key=lambda e: (e["ts"], -e["dur"]))
        self.runs = [e for e in ev if e["name"].startswith("gloo:")]
        self.times = [e["ts"] for e in ev if e.get("cat") in ("cpu_op", "user_annotation")]
        stack, self.parent = [], {}
        for i, e in enumerate(self.cpu):
            while stack and self.cpu[stack[-1]]["ts"] + self.cpu[stack[-1]]["dur"] <= e["ts"]:
                stack.pop()
            self.parent[i] = stack[-1] if stack else None
            stack.append(i)
        self.tops = [e for i, e in enumerate(self.cpu) if self.parent[i] is None]

    def step_of(self, ts):
        for n, s in self.steps.items():
            if s["ts"] <= ts < s["ts"] + s["dur"]:
                return n
        return None

    def collectives(self):
        """(step, kind, bytes_in, bytes_out) of every collective, from the functional
        collective that called the c10d op (its input's shape and dtype, its group size)."""
        has_c10d_child = {self.parent[i] for i, e in enumerate(self.cpu)
                          if e["name"].startswith("c10d::")}
        out = []
        for i, e in enumerate(self.cpu):
            if not e["name"].startswith("c10d::") or i in has_c10d_child:
                continue
            a = self.parent[i]
            while a is not None and not self.cpu[a]["name"].startswith("_c10d_functional::"):
                a = self.parent[a]
            step = self.step_of(e["ts"])
            if a is None:
                check(e["name"] == "c10d::barrier", f"rank {self.rank}: {e['name']} unexpected")
                out.append((step, "barrier", 0, 0))
                continue
            f = self.cpu[a]["args"]
            name = self.cpu[a]["name"][len("_c10d_functional::"):]
            nbytes = numel(f["Input Dims"][0]) * ESIZE[f["Input type"][0]]
            if name == "all_gather_into_tensor":
                out.append((step, "all_gather", nbytes, nbytes * int(f["Concrete Inputs"][1])))
            elif name == "reduce_scatter_tensor":
                out.append((step, "reduce_scatter", nbytes,
                            nbytes // int(f["Concrete Inputs"][2])))
            elif name == "all_reduce":
                out.append((step, "all_reduce", nbytes, nbytes))
            else:
                check(False, f"rank {self.rank}: functional {name} not expected in the fixture")
        return out

    def module_at(self, ts):
        """The innermost nn.Module frame open at ts (its "<Class>_<k>")."""
        inner = None
        for f in self.frames:
            if f["ts"] <= ts < f["ts"] + f["dur"]:
                inner = f["name"][len("nn.Module: "):]
        return inner


def check_schema(events):
    ids = collections.defaultdict(set)
    for e in events:
        if e.get("ph") != "X":
            continue
        a = e.get("args", {})
        check(e.get("tid") in LANES, f"lane {e.get('tid')} of {e['name']}")
        check(isinstance(a.get("id"), int), f"{e['name']} has no integer id")
        check(a.get("id") not in ids[e["pid"]], f"id {a.get('id')} twice on rank {e['pid']}")
        ids[e["pid"]].add(a.get("id"))
    for e in events:
        if e.get("ph") != "X":
            continue
        a = e["args"]
        check(all(d in ids[e["pid"]] for d in a.get("deps", [])), f"{e['name']}: dep not on rank")
        if e["tid"] == 0:
            check(isinstance(a.get("op"), str) and a["op"], f"op event {e['name']} without op")
        if e["tid"] in (2, 4):
            for k in ("kind", "group", "group_size", "bytes_in", "bytes_out", "seq"):
                check(k in a, f"collective {e['name']} without {k}")
        if e["tid"] == 5:
            check(e["name"] == "step" and isinstance(a.get("step"), int), "step event shape")


def test_fixture(tool, fixdir, tmp):
    paths = sorted(glob.glob(os.path.join(fixdir, "*_rank*.json.gz")))
    check(len(paths) >= 2, f"fixtures in {fixdir}")
    out = os.path.join(tmp, "torch.json")
    p = convert(tool, paths, out)
    check(p.returncode == 0, f"conversion failed: {p.stderr}")
    if p.returncode:
        return
    events = load(out)
    check_schema(events)
    raws = {r.rank: r for r in map(Raw, paths)}
    x = [e for e in events if e.get("ph") == "X"]
    check(abs(min(e["ts"] for e in x)) < 1e-3, "times start at 0")
    shifts = []
    for rank, raw in raws.items():
        mine = [e for e in x if e["pid"] == rank]
        steps = {e["args"]["step"]: e for e in mine if e["tid"] == 5}
        check(sorted(steps) == sorted(raw.steps), f"rank {rank}: steps {sorted(steps)}")
        for n, s in steps.items():
            check(abs(s["dur"] - raw.steps[n]["dur"]) < 2e-3, f"rank {rank} step {n} span")
            shifts.append(s["ts"] - raw.steps[n]["ts"])
        # top-level ops by name
        ops = collections.Counter(e["name"] for e in mine if e["tid"] == 0)
        check(ops == collections.Counter(e["name"] for e in raw.tops),
              f"rank {rank}: top-level ops differ")
        check(sum(ops.values()) > 100, f"rank {rank}: only {sum(ops.values())} ops")
        # every local matrix product (the innermost of a DTensor mm and the mm it dispatches
        # to through PythonSubclass) is one compute-lane kernel, inside an op
        for name in ("aten::mm", "aten::bmm", "aten::addmm"):
            outer = set()  # events with a `name` below them
            for i, e in enumerate(raw.cpu):
                a = raw.parent[i] if e["name"] == name else None
                while a is not None:
                    outer.add(a)
                    a = raw.parent[a]
            inner = [i for i, e in enumerate(raw.cpu) if e["name"] == name and i not in outer]
            check(sum(e["name"] == name for e in mine if e["tid"] == 1) == len(inner),
                  f"rank {rank}: {name} kernels")
            check(name != "aten::mm" or len(inner) > 0, f"rank {rank}: no local aten::mm")
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in mine if e["tid"] == 0)
        for k in (e for e in mine if e["tid"] == 1):
            check(any(a - 2e-3 <= k["ts"] and k["ts"] + k["dur"] <= b + 2e-3 for a, b in spans),
                  f"rank {rank}: kernel {k['name']} outside every op")
            check(k["name"] not in ("aten::view", "aten::empty", "aten::as_strided"),
                  f"rank {rank}: {k['name']} on the compute lane")
        # collectives per step by kind and bytes
        colls = [e for e in mine if e["tid"] in (2, 4)]
        got = collections.Counter((e["args"].get("step"), e["args"]["kind"], e["args"]["bytes_in"],
                                   e["args"]["bytes_out"]) for e in colls)
        want = collections.Counter(raw.collectives())
        check(got == want, f"rank {rank}: collectives {sorted(got.items())} != {sorted(want.items())}")
        check(len(colls) == len(raw.runs), f"rank {rank}: {len(colls)} collectives, "
                                           f"{len(raw.runs)} gloo runs")
        run_ts = sorted(r["ts"] + shifts[0] for r in raw.runs)
        for e in (e for e in colls if e["tid"] == 4):
            check(any(abs(e["ts"] - t) < 2e-3 for t in run_ts),
                  f"rank {rank}: {e['name']} at {e['ts']} not timed by a gloo run")
        check(all(e["args"]["group_size"] == 2 for e in colls), f"rank {rank}: group size")
        # an op read a collective's output: it lists the collective
        coll_ids = {e["args"]["id"] for e in colls}
        consumers = [e for e in mine if e["tid"] == 0 and coll_ids & set(e["args"]["deps"])]
        check(len(consumers) >= len(steps) * 4, f"rank {rank}: {len(consumers)} consumers")
        # modules: a forward op's innermost module frame ends its module text
        for e, r in zip((e for e in mine if e["tid"] == 0), raw.tops):
            inner = raw.module_at(r["ts"])
            if inner:
                check(e["args"]["module"].split(".")[-1] == inner,
                      f"rank {rank}: {e['name']} module {e['args']['module']} not {inner}")
    check(max(shifts) - min(shifts) < 2e-3, "one time shift for all ranks")
    # seq: the same collective on every rank of its group
    by_seq = collections.defaultdict(dict)
    for e in x:
        if e["tid"] in (2, 4):
            a = e["args"]
            by_seq[(a["group"], a["seq"])][e["pid"]] = (a["kind"], a["bytes_in"], a["bytes_out"])
    # seq counts each rank's collectives on the group in the order they ran (gloo runs them
    # in issue order)
    for rank in raws:
        groups = collections.defaultdict(list)
        for e in sorted((e for e in x if e["pid"] == rank and e["tid"] in (2, 4)),
                        key=lambda e: e["ts"]):
            groups[e["args"]["group"]].append(e["args"]["seq"])
        for g, seqs in groups.items():
            check(seqs == list(range(len(seqs))), f"rank {rank} group {g}: seq {seqs[:10]}...")
    for key, per_rank in by_seq.items():
        check(len(per_rank) == len(raws) and len(set(per_rank.values())) == 1,
              f"seq {key}: {per_rank}")
    print(f"fixture: {len(x)} events, {len(by_seq)} collectives per rank, ranks {sorted(raws)}")


def test_nccl_style(tool, tmp):
    """record_param_comms (what NCCL's process group records): kind, sizes and group come
    from its arguments."""
    calls = [("allreduce", 1024, 1024, "Float"), ("_allgather_base", 256, 1024, "BFloat16"),
             ("reduce_scatter_tensor_coalesced", 1024, 256, "Float")]
    kinds = {"allreduce": "all_reduce", "_allgather_base": "all_gather",
             "reduce_scatter_tensor_coalesced": "reduce_scatter"}
    paths = []
    for rank in range(2):
        ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 9, "tid": 9,
               "ts": 100.0, "dur": 1000.0, "args": {}}]
        for i, (name, nin, nout, dt) in enumerate(calls):
            ts = 200.0 + 100 * i
            ev.append({"ph": "X", "cat": "cpu_op", "name": "c10d::" + name.strip("_") + "_",
                       "pid": 9, "tid": 9, "ts": ts, "dur": 50.0, "args": {}})
            ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 9,
                       "tid": 9, "ts": ts + 1, "dur": 40.0,
                       "args": {"Collective name": name, "In msg nelems": nin,
                                "Out msg nelems": nout, "dtype": dt, "Group size": 4,
                                "Process Group Name": "3", "Process Group Description": "tp"}})
        path = os.path.join(tmp, f"nccl_rank{rank}.json")
        with open(path, "w") as f:
            json.dump({"distributedInfo": {"rank": rank, "backend": "nccl"}, "traceEvents": ev}, f)
        paths.append(path)
    out = os.path.join(tmp, "nccl.json")
    p = convert(tool, paths, out)
    check(p.returncode == 0, f"nccl-style conversion: {p.stderr}")
    if p.returncode:
        return
    events = load(out)
    check_schema(events)
    for rank in range(2):
        colls = sorted((e for e in events if e.get("ph") == "X" and e["pid"] == rank
                        and e["tid"] in (2, 4)), key=lambda e: e["args"]["seq"])
        want = [(kinds[n], nin * ESIZE[dt], nout * ESIZE[dt], "tp", 4, i, 2)
                for i, (n, nin, nout, dt) in enumerate(calls)]
        got = [(e["args"]["kind"], e["args"]["bytes_in"], e["args"]["bytes_out"],
                e["args"]["group"], e["args"]["group_size"], e["args"]["seq"], e["tid"])
               for e in colls]
        check(got == want, f"nccl-style rank {rank}: {got} != {want}")


def test_bad_inputs(tool, fixdir, tmp):
    good = sorted(glob.glob(os.path.join(fixdir, "*_rank*.json.gz")))[0]

    def write(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    no_ts = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
                              "tid": 1, "dur": 3.0}]}
    trunc = os.path.join(tmp, "trunc.json.gz")
    with open(good, "rb") as f, open(trunc, "wb") as g:
        g.write(f.read()[:5000])
    cases = [
        ([write("notjson.json", "this is not { json")], ["notjson.json", "not JSON"]),
        ([write("nottrace.json", '{"a": 1}')], ["nottrace.json", "traceEvents"]),
        ([write("nots.json", json.dumps(no_ts))], ["nots.json", "\"ts\"", "aten::mm"]),
        ([write("empty.json", '{"traceEvents": []}')], ["empty.json", "cpu_op"]),
        ([write("badrank.json", '{"distributedInfo": {"rank": "x"}, "traceEvents": []}')],
         ["badrank.json", "rank"]),
        ([good, good], ["rank 0", os.path.basename(good)]),
        ([os.path.join(tmp, "missing.json")], ["missing.json", "cannot open"]),
        ([trunc], ["trunc.json.gz"]),
    ]
    for inputs, words in cases:
        out = os.path.join(tmp, "bad_out.json")
        p = convert(tool, inputs, out)
        check(p.returncode == 1, f"{words[0]}: exit {p.returncode} (want 1): {p.stderr}")
        check(all(w in p.stderr for w in words), f"{words[0]}: message {p.stderr!r} lacks {words}")
        check(not os.path.exists(out), f"{words[0]}: output written")
    p = convert(tool, [good], os.path.join(tmp, "no", "such", "dir.json"))
    check(p.returncode == 1 and "cannot write" in p.stderr, f"unwritable output: {p.stderr}")
    p = subprocess.run([tool], capture_output=True, text=True)
    check(p.returncode == 2 and "usage" in p.stderr, "no arguments: usage")


def test_mutations(tool, fixdir, tmp, seed=20261206, rounds=60):
    """Fields of a real trace replaced by values of the wrong type or out of range: the
    converter answers 0 or 1 (with a message), never a crash."""
    import random
    rng = random.Random(seed)
    good = load(sorted(glob.glob(os.path.join(fixdir, "*_rank*.json.gz")))[0])
    # the steps' thread, cut short: a few hundred events of each kind the converter reads
    base = dict(good, traceEvents=good["traceEvents"][:600] + [
        e for e in good["traceEvents"] if e.get("name", "").startswith(("gloo:", "Profiler"))])
    junk = [None, "x", -1, 1e300, [], {}, [[1, "a"]], [[[-5]]], True, "nan"]
    for i in range(rounds):
        trace = json.loads(json.dumps(base))
        for _ in range(rng.randint(1, 4)):
            e = rng.choice(trace["traceEvents"])
            if rng.random() < 0.5 and isinstance(e.get("args"), dict) and e["args"]:
                e["args"][rng.choice(sorted(e["args"]))] = rng.choice(junk)
            else:
                e[rng.choice(["ts", "dur", "tid", "name", "ph", "cat", "args", "id"])] = \
                    rng.choice(junk)
        path = os.path.join(tmp, "mutant.json")
        with open(path, "w") as f:
            json.dump(trace, f)
        p = convert(tool, [path], os.path.join(tmp, "mutant_out.json"))
        check(p.returncode in (0, 1) and "Sanitizer" not in p.stderr,
              f"mutation {i} (seed {seed}): exit {p.returncode}: {p.stderr[-300:]}")
        check(p.returncode == 0 or "mutant.json" in p.stderr, f"mutation {i}: message {p.stderr}")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    tool, fixdir = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        test_fixture(tool, fixdir, tmp)
        test_nccl_style(tool, tmp)
        test_bad_inputs(tool, fixdir, tmp)
        test_mutations(tool, fixdir, tmp)
    print(f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
