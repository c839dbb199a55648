"""Hand-made traces for the studio test, in the full trace schema (docs/tracing.md: ids, deps,
module, steps, collective kind/group/bytes/seq/from/to, dt_run metadata) and in the older one
(no ids or deps, no steps), generated from a seed so a failure replays."""
import json
import random


def rank_events(rnd, pid, nsteps, layers, group, gsize, pipeline):
    """One rank's events: per step, FSDP-style all-gathers on the comm thread (tid 4) that
    each layer's forward op and kernel wait for, a backward kernel per layer followed by a
    blocking collective on the rank thread (tid 2) that reads it, and an optimizer kernel that
    waits for them all."""
    ev, nid, seq, t = [], [0], [0], 100.0 + rnd.uniform(0, 5)

    def add(name, tid, ts, dur, **args):
        args["id"] = nid[0]
        nid[0] += 1
        ev.append({"name": name, "cat": "x", "ph": "X", "ts": round(ts, 3), "dur": round(dur, 3),
                   "pid": pid, "tid": tid, "args": args})
        return args["id"]

    def coll(kind, tid, ts, dur, nbytes, op, frm, to, deps, step):
        i = add(kind, tid, ts, dur, kind=kind, group=group, group_size=gsize,
                bytes_in=nbytes // gsize if kind == "all_gather" else nbytes,
                bytes_out=nbytes if kind == "all_gather" else nbytes // gsize, op=op,
                seq=seq[0], deps=deps, step=step, detail=f"{kind} {frm}->{to}", module="")
        ev[-1]["args"]["from"], ev[-1]["args"]["to"] = frm, to  # "from" is a Python keyword
        seq[0] += 1
        return i

    for step in range(nsteps):
        s0 = t
        # comm thread: the all-gathers, issued in order with host gaps
        ag, ct = [], t + rnd.uniform(1, 3)
        ag_end = []
        for layer in range(layers):
            d = rnd.uniform(20, 40)
            ag.append(coll("all_gather", 4, ct, d, 1 << 20, "matmul", "S(0)", "R", [], step))
            ag_end.append(ct + d)
            ct += d + rnd.uniform(2, 15)
        kt, last = t + rnd.uniform(1, 4), []
        for layer in range(layers):
            start = max(kt, ag_end[layer]) + rnd.uniform(0.5, 2)
            d = rnd.uniform(15, 30)
            mod = f"layers.{layer}"
            add("matmul", 0, start - 0.4, d + 0.8, op="matmul", module=mod, deps=[ag[layer]], step=step)
            k = add("sgemm", 1, start, d, op="matmul", module=mod, deps=[ag[layer]], step=step)
            kt = start + d
            last.append(k)
        rs = []
        for layer in reversed(range(layers)):
            start = kt + rnd.uniform(0.5, 2)
            d = rnd.uniform(15, 30)
            b = add("sgemm_bwd", 1, start, d, op="matmul_backward", module=f"layers.{layer}", deps=[],
                    step=step)
            kt = start + d + rnd.uniform(0.2, 1)
            kind = "all_reduce" if pipeline else "reduce_scatter"
            d2 = rnd.uniform(10, 25)
            rs.append(coll(kind, 2, kt, d2, 1 << 19, "matmul_backward", "P(sum)",
                           "R" if pipeline else "S(0)", [b], step))
            kt += d2
        start = kt + rnd.uniform(1, 3)
        d = rnd.uniform(10, 20)
        add("adamw", 0, start - 0.3, d + 0.6, op="adamw", module="", deps=rs, step=step)
        add("adamw_kernel", 1, start, d, op="adamw", module="", deps=rs, step=step)
        end = max(start + d, ct) + rnd.uniform(2, 6)
        if pipeline:
            mid = s0 + (end - s0) * rnd.uniform(0.3, 0.5)
            add("forward", 3, s0, mid - s0, step=step, detail="stage 0 micro 0 forward")
            idle = rnd.uniform(5, 30)
            add("idle", 3, mid, idle, step=step, detail="")
            add("backward", 3, mid + idle, end - mid - idle, step=step, detail="stage 0 micro 0 backward")
        add("step", 5, s0, end - s0, step=step)
        t = end + rnd.uniform(1, 5)
    return ev


def full_run(seed, name, ranks, group, pipeline, gflops):
    rnd = random.Random(seed)
    out = []
    for r in range(ranks):
        meta = [{"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}},
                {"name": "dt_run", "ph": "M", "pid": r,
                 "args": {"name": name, "gflops": gflops, "layout": f"{group}={ranks}"}}]
        out.append(meta + rank_events(rnd, r, 3, 4, group, ranks, pipeline))
    return out


def legacy_run(seed, ranks):
    """Today's older traces: lanes 0-3, only a detail text (a collective's: its group and
    bytes, or none), no ids, deps or steps."""
    rnd = random.Random(seed)
    out = []
    for r in range(ranks):
        ev, t = [{"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}}], 50.0
        for i in range(30):
            tid = [0, 1, 2][i % 3]
            d = rnd.uniform(3, 20)
            nb = rnd.choice([0, 4096, 65536])
            detail = f"group tp of 2, {nb // 2} B in, {nb} B out" if tid == 2 and nb else "x"
            ev.append({"name": ["add", "sgemm", "all_gather"][tid], "cat": "x", "ph": "X", "ts": round(t, 3),
                       "dur": round(d, 3), "pid": r, "tid": tid, "args": {"detail": detail}})
            t += d + rnd.uniform(0, 4)
        out.append(ev)
    return out


def write(path, events):
    with open(path, "w") as f:
        json.dump(events, f)
