#!/usr/bin/python3
"""The trace studio page in headless Chromium: dtensor-trace studio writes a two-run comparison
from hand-made traces in the full schema (one run given as per-rank files); the page's table
must equal the figures computed here from the same JSON; zoom narrows the view; hovering a
collective shows its args, clicking it lists the events whose deps name it; a collective
dragged with real mouse actions, then the network and GPU knobs, give the step time, overlap
and critical path that this file's own scheduler computes (docs/tracing.md's model). A run in
the older schema (no ids, deps, steps) loads too. Skipped (77) only where Chromium or its driver cannot start.
Usage: test_studio.py DTENSOR_TRACE [--screenshot OUT.png] [--seed N]"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import studio_fixtures as fx  # noqa: E402

FIELDS = ["time", "compute", "comm", "overlap", "exposed", "bubble", "colls", "bytes"]


# ---- the figures, computed independently from the trace JSON -----------------------------
def load(events):
    ranks = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        r = ranks.setdefault(e["pid"], {"ev": [], "steps": {}})
        a = e.get("args", {})
        if e.get("tid", 0) == 5:
            r["steps"][a["step"]] = (e["ts"], e["ts"] + e["dur"])
        else:
            r["ev"].append(dict(e, end=e["ts"] + e["dur"], args=a))
    for r in ranks.values():
        if not r["steps"]:
            r["steps"][0] = (min(e["ts"] for e in r["ev"]), max(e["end"] for e in r["ev"]))
    return ranks


def covered(ivs, s, e):
    """Length of the union of intervals, clipped to [s, e], and the union itself."""
    pts = sorted((max(a, s), min(b, e)) for a, b in ivs if min(b, e) > max(a, s))
    out = []
    for a, b in pts:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(u):
    return sum(b - a for a, b in u)


def inter(u, v):
    return sum(max(0, min(b, d) - max(a, c)) for a, b in u for c, d in v)


def nbytes(e):
    a = e["args"]
    if "kind" not in a:  # an older trace: the bytes are in the detail text
        m = re.match(r"group \S+ of \d+, (\d+) B in, (\d+) B out", a.get("detail", ""))
        return max(int(m.group(1)), int(m.group(2))) if m else 0
    return max(a.get("bytes_in", 0), a.get("bytes_out", 0))


def step_figures(ranks, k):
    f = dict.fromkeys(FIELDS, 0.0)
    n, bub = 0, []
    for r in ranks.values():
        if k not in r["steps"]:
            continue
        s, e = r["steps"][k]
        n += 1
        f["time"] = max(f["time"], e - s)
        comp = covered([(x["ts"], x["end"]) for x in r["ev"] if x["tid"] == 1], s, e)
        comm = covered([(x["ts"], x["end"]) for x in r["ev"] if x["tid"] in (2, 4)], s, e)
        f["compute"] += length(comp)
        f["comm"] += length(comm)
        f["overlap"] += inter(comp, comm)
        f["exposed"] += length(comm) - inter(comp, comm)
        colls = [x for x in r["ev"] if x["tid"] in (2, 4) and s <= x["ts"] < e]
        f["colls"] += len(colls)
        f["bytes"] += sum(nbytes(x) for x in colls)
        idle = length(covered([(x["ts"], x["end"]) for x in r["ev"] if x["tid"] == 3 and x["name"] == "idle"], s, e))
        busy = length(covered([(x["ts"], x["end"]) for x in r["ev"] if x["tid"] == 3 and x["name"] != "idle"], s, e))
        if idle + busy > 0:
            bub.append(idle / (idle + busy))
    for k2 in ["compute", "comm", "overlap", "exposed", "colls", "bytes"]:
        f[k2] /= n
    f["bubble"] = sum(bub) / len(bub) if bub else None
    return f


def summary(ranks):
    ks = sorted({k for r in ranks.values() for k in r["steps"]})
    ks = ks[1:] if len(ks) > 1 else ks
    figs = [step_figures(ranks, k) for k in ks]
    out = {}
    for f in FIELDS:
        vals = [x[f] for x in figs if x[f] is not None]
        out[f] = sum(vals) / len(vals) if vals else None
    return out


# ---- the what-if scheduler, written from docs/tracing.md ----------------------------------
def whatif(ranks, k, moves, net=None, scale=1.0):
    """moves: [(pid, id, not_before)] in order; net: (alpha us, GB/s) or None (as recorded);
    scale: compute's time factor. Returns (step time, mean overlap, critical path keys, starts)."""
    streams, gap, where = [], {}, {}
    rk_of, by_key = {}, {}
    for pid, r in sorted(ranks.items()):
        if k not in r["steps"]:
            continue
        s, e = r["steps"][k]
        for x in r["ev"]:
            by_key[(pid, x["args"].get("id"))] = x
        for tids in ((1, 2), (4,)):
            evs = sorted((x for x in r["ev"] if x["tid"] in tids and s <= x["ts"] < e),
                         key=lambda x: (x["ts"], x["tid"]))
            for i, x in enumerate(evs):
                key = (pid, x["args"]["id"])
                gap[key] = x["ts"] - (evs[i - 1]["end"] if i else s)
                where[key] = len(streams)
                rk_of[key] = pid
            streams.append({"pid": pid, "start": s, "keys": [(pid, x["args"]["id"]) for x in evs]})
    inset = set(where)
    inst = {}
    for key in inset:
        a = by_key[key]["args"]
        if by_key[key]["tid"] in (2, 4) and "group" in a and "seq" in a and \
                by_key[key]["name"] not in ("send", "recv"):
            inst.setdefault((a.get("comm") or a["group"], a["seq"]), []).append(key)
    for v in inst.values():
        v.sort()

    def members(key):
        a = by_key[key]["args"]
        return inst.get((a.get("comm") or a.get("group"), a.get("seq")), [key]) if by_key[key]["tid"] in (2, 4) else [key]

    def dur(key):
        x = by_key[key]
        if x["tid"] not in (2, 4):
            return x["dur"] * scale
        ms = members(key)
        nb = max(nbytes(by_key[m]) for m in ms)
        if net is None or nb <= 0:
            return min(by_key[m]["dur"] for m in ms)
        n = x["args"].get("group_size", len(ms))
        kind = x["args"].get("kind", x["name"])
        if kind == "all_reduce":
            steps, frac = 2 * (n - 1), 2 * (n - 1) / n
        elif kind in ("all_gather", "reduce_scatter", "all_to_all"):
            steps, frac = n - 1, (n - 1) / n
        else:
            steps, frac = 1, 1
        return steps * net[0] + frac * nb / (net[1] * 1e3)

    def sched(moved):
        start, end, bind = {}, {}, {}
        remaining = {key for key in inset}
        ready = {}
        while remaining:
            progressed = False
            for st in streams:
                for i, key in enumerate(st["keys"]):
                    if key in end:
                        continue
                    if i and st["keys"][i - 1] not in end:
                        break
                    if key not in ready:
                        t = (end[st["keys"][i - 1]] if i else st["start"]) + (0 if key in moved else gap[key])
                        b = st["keys"][i - 1] if i else None
                        deps = [(key[0], d) for d in by_key[key]["args"].get("deps", [])]
                        if any(d in inset and d not in end for d in deps):
                            break
                        for d in deps:
                            if d in by_key and (end[d] if d in inset else by_key[d]["end"]) > t:
                                t, b = (end[d] if d in inset else by_key[d]["end"]), d
                        if key in moved and moved[key] > t:
                            t, b = moved[key], "moved"
                        ready[key], bind[key] = t, b
                    ms = members(key)
                    if not all(m in ready for m in ms):
                        break
                    t0 = max(ready[m] for m in ms)
                    last = next(m for m in ms if ready[m] == t0)
                    for m in ms:
                        start[m], end[m] = t0, t0 + dur(m)
                        if ready[m] < t0:
                            bind[m] = last
                        remaining.discard(m)
                    progressed = True
            if not progressed:
                raise RuntimeError("the what-if schedule deadlocks")
        return start, end, bind

    def reach(key, down):
        seen, stack = set(), [key]
        while stack:
            cur = stack.pop()
            if down:
                nxt = [(cur[0], y["args"]["id"]) for y in ranks[cur[0]]["ev"]
                       if cur[1] in y["args"].get("deps", [])]
            else:
                nxt = [(cur[0], d) for d in by_key[cur]["args"].get("deps", []) if (cur[0], d) in by_key]
            for n in nxt:
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return seen

    def place(key, t, start, moved):
        st = streams[where[key]]
        rest = [x for x in st["keys"] if x != key]
        at = next((j for j, x in enumerate(rest) if start[x] > t), len(rest))
        up, down = reach(key, False), reach(key, True)
        for j, x in enumerate(rest):
            if x in up and at <= j:
                at = j + 1
        for j in range(len(rest) - 1, -1, -1):
            if rest[j] in down and at > j:
                at = j
        rest.insert(at, key)
        st["keys"] = rest
        moved[key] = t

    moved = {}
    start, end, bind = sched(moved)
    for pid, i, t in moves:
        a = by_key[(pid, i)]["args"]
        for key in inst.get((a.get("comm") or a.get("group"), a.get("seq")), [(pid, i)]):  # the instance moves
            place(key, t, start, moved)
        start, end, bind = sched(moved)
    worst, worst_ev, ov = None, None, []
    for pid, r in sorted(ranks.items()):
        if k not in r["steps"]:
            continue
        s, e = r["steps"][k]
        keys = [x for x in inset if x[0] == pid]
        rec_last = max([by_key[x]["end"] for x in keys], default=s)
        last = None
        for st in streams:
            for x in st["keys"] if st["pid"] == pid else []:
                if last is None or end[x] > end[last]:
                    last = x
        span = (end[last] if last else s) + (e - rec_last) - s
        if worst is None or span > worst:
            worst, worst_ev = span, last
        comp = covered([(start[x], end[x]) for x in keys if by_key[x]["tid"] == 1], -1e300, 1e300)
        comm = covered([(start[x], end[x]) for x in keys if by_key[x]["tid"] in (2, 4)], -1e300, 1e300)
        ov.append(inter(comp, comm))
    crit, x = set(), worst_ev
    while x is not None and x != "moved":
        crit.add(x)
        x = bind[x]
    return worst, sum(ov) / len(ov), crit, start


# ---- the browser ---------------------------------------------------------------------------
def close(a, b, what):
    if a is None or b is None:
        ok = a is None and b is None
    else:
        ok = abs(a - b) <= 1e-6 * max(1.0, abs(b))
    if not ok:
        sys.exit(f"FAIL: {what}: page {a}, expected {b}")


def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        print("python3-selenium not installed: skipped")
        sys.exit(77)
    drv = os.environ.get("DT_CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/lib/chromium/chromedriver"
    if not os.path.exists(drv):
        print("no chromedriver (Debian: chromium-driver): skipped")
        sys.exit(77)
    opts = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"]:
        opts.add_argument(a)
    try:
        return webdriver.Chrome(service=Service(drv), options=opts)
    except Exception as e:  # noqa: BLE001 - any start failure is a skip
        print(f"chromium or its driver cannot start: skipped ({str(e).splitlines()[0]})")
        sys.exit(77)


def open_page(d, path):
    from selenium.webdriver.support.ui import WebDriverWait
    d.get("file://" + path)
    WebDriverWait(d, 30).until(lambda x: x.execute_script("return document.body.getAttribute('data-ready')"))
    errs = d.execute_script("return window.__dtErrors")
    if errs:
        sys.exit(f"FAIL: script errors on the page: {errs}")


def check_table(d, runs):
    for name, ranks in runs:
        want = summary(ranks)
        for f in FIELDS:
            v = d.execute_script(
                "var r=[...document.querySelectorAll('#compare tr')].find(t=>t.dataset.run===arguments[0]);"
                "return r ? r.querySelector('[data-field='+arguments[1]+']').dataset.value : 'missing';", name, f)
            if v == "missing":
                sys.exit(f"FAIL: no table row for run {name}")
            close(float(v) if v else None, want[f], f"{name} {f}")
        print(f"table row {name}: " + ", ".join(f"{f} {want[f]:.2f}" for f in FIELDS if want[f] is not None))


def box_offset(d, canvas, pid, eid):
    """The middle of an event's box (run 0), as an offset from the canvas's centre."""
    d.execute_script("window.scrollTo(0, arguments[0].getBoundingClientRect().top + window.scrollY - 20)", canvas)
    r = d.execute_script("return DTS.view.boxRect(DTS.runs[0].ranks.find(k => k.pid === arguments[0]).byId[arguments[1]]);",
                         pid, str(eid))
    return r["x"] + r["w"] / 2 - canvas.size["width"] / 2, r["y"] + r["h"] / 2 - canvas.size["height"] / 2


def details(d, box):
    """The rows (th: td) of an event's details, in the tooltip or the selection."""
    return d.execute_script("var o = {}; document.querySelectorAll('#' + arguments[0] + ' tr').forEach("
                            "r => o[r.cells[0].textContent] = r.cells[1].textContent); return o;", box)


def check_details(d, canvas, ranks):
    """Hovering rank 1's first reduce-scatter shows its kind, group, bytes, placements and op;
    clicking it lists as consumers exactly the events whose deps name it."""
    from selenium.webdriver.common.action_chains import ActionChains
    r1 = ranks[1]
    s, e = r1["steps"][1]
    c = next(x for x in r1["ev"] if x["tid"] == 2 and s <= x["ts"] < e)
    a = c["args"]
    x, y = box_offset(d, canvas, 1, a["id"])
    ActionChains(d).move_to_element_with_offset(canvas, x, y).perform()
    tip = details(d, "tip")
    for k, want in (("kind", a["kind"]), ("group", f"{a['group']} ({a['group_size']} ranks)"),
                    ("bytes in / out", f"{a['bytes_in']} / {a['bytes_out']}"),
                    ("placements", f"{a['from']} -> {a['to']}"), ("needed by op", a["op"])):
        if tip.get(k) != want:
            sys.exit(f"FAIL: hovering {a['kind']} {a['id']}: {k} is {tip.get(k)!r}, not {want!r}")
    ActionChains(d).move_to_element_with_offset(canvas, x, y).click().perform()
    got = d.execute_script("var v = DTS.view; return v.selected ? v.selected.consumers.map(q => +q.id) : null;")
    want = sorted(y["args"]["id"] for y in r1["ev"] if a["id"] in y["args"].get("deps", []))
    if got is None or sorted(got) != want or not want:
        sys.exit(f"FAIL: clicked {a['kind']} {a['id']}: consumers {got}, expected {want}")
    names = ", ".join(y["args"].get("op", y["name"]) for y in r1["ev"] if a["id"] in y["args"].get("deps", []))
    if details(d, "selected").get("consumers") != names:
        sys.exit(f"FAIL: the selection lists consumers {details(d, 'selected')}, not {names!r}")
    print(f"details: {a['kind']} {a['id']} on rank 1 shows its group, bytes, placements, op and {len(want)} consumer(s)")


def check_critical(d, crit):
    got = d.execute_script(
        "return [...DTS.view.whatif.sched.critical].map(e => [e.rank.pid, e.id]);")
    got = {(p, int(i)) for p, i in got}
    if got != crit:
        sys.exit(f"FAIL: critical path: page {sorted(got)}, expected {sorted(crit)}")
    print(f"critical path: {len(crit)} events, as computed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("--screenshot")
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(2), "little"))
    args = ap.parse_args()
    print(f"seed {args.seed}")
    tmp = tempfile.mkdtemp()
    try:
        run(args, tmp)
    finally:
        shutil.rmtree(tmp)


def check_cli(tool, tmp):
    """Bad input: a clear message naming the file (and the event), never a crash."""
    with open(f"{tmp}/bad.json", "w") as f:
        f.write('[{"name":"x","ph":"X","ts":1,"pid":0}]')
    with open(f"{tmp}/broken.json", "w") as f:
        f.write('[{"name":')
    cases = [([f"{tmp}/nope.json"], 1, "nope.json"), ([f"{tmp}/broken.json"], 1, "broken.json"),
             ([f"{tmp}/bad.json"], 1, "event 0 lacks a numeric ts, dur or pid"),
             (["--bogus", f"{tmp}/bad.json"], 2, "unknown option \"--bogus\"")]
    for extra, rc, text in cases:
        p = subprocess.run([tool, "studio", "-o", f"{tmp}/x.html"] + extra, capture_output=True, text=True)
        if p.returncode != rc or text not in p.stderr:
            sys.exit(f"FAIL: dtensor-trace studio {extra}: exit {p.returncode}, {p.stderr!r} (wanted {rc}, {text!r})")
    p = subprocess.run([tool, "studio", f"{tmp}/bad.json"], capture_output=True, text=True)
    if p.returncode != 2 or "usage" not in p.stderr:
        sys.exit(f"FAIL: studio without -o: exit {p.returncode}")
    print("bad input: each refused with a message naming it")


def run(args, tmp):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
    from selenium.webdriver.support.ui import Select
    a = fx.full_run(args.seed, "fsdp dp=2", 2, "dp", False, 40.0)
    b = fx.full_run(args.seed + 1, "tp=4 + pp", 4, "tp", True, 40.0)
    fx.write(f"{tmp}/a.json", [e for r in a for e in r])
    for i, r in enumerate(b):
        fx.write(f"{tmp}/b{i}.json", r)
    page = f"{tmp}/studio.html"
    bfiles = ",".join(f"{tmp}/b{i}.json" for i in range(len(b)))
    subprocess.run([args.tool, "studio", "-o", page, f"{tmp}/a.json", bfiles], check=True)
    runs = [("fsdp dp=2", load([e for r in a for e in r])), ("tp=4 + pp", load([e for r in b for e in r]))]
    check_cli(args.tool, tmp)
    d = browser()
    try:
        open_page(d, page)
        check_table(d, runs)
        canvas = d.find_element("id", "timeline")
        span = lambda: float(canvas.get_attribute("data-t1")) - float(canvas.get_attribute("data-t0"))  # noqa: E731
        full, drawn = span(), int(canvas.get_attribute("data-drawn"))
        d.find_element("id", "zoom-in").click()
        close(span(), full / 2, "span after the zoom button")
        ActionChains(d).scroll_from_origin(ScrollOrigin.from_element(canvas, 100, 0), 0, -300).perform()
        if not span() < full / 2 - 1e-9:
            sys.exit(f"FAIL: the mouse wheel did not zoom in ({span()} of {full})")
        if not int(canvas.get_attribute("data-drawn")) < drawn:
            sys.exit("FAIL: zoomed in, the page still draws every box")
        print(f"zoom: {full:.1f} us -> {span():.1f} us, boxes {drawn} -> {canvas.get_attribute('data-drawn')}")
        d.find_element("id", "fit").click()
        check_details(d, canvas, runs[0][1])

        # What-if on run a, step 1: drag rank 0's last all-gather of the step earlier.
        Select(d.find_element("id", "wi-run")).select_by_index(1)
        k = 1
        r0 = runs[0][1][0]
        s, e = r0["steps"][k]
        ags = [x for x in r0["ev"] if x["tid"] == 4 and s <= x["ts"] < e]
        target = ags[-1]
        base = whatif(runs[0][1], k, [])[0]
        close(float(d.find_element("id", "wi-base").get_attribute("data-value")), base, "step time rescheduled unmoved")
        d.execute_script("window.scrollTo(0, arguments[0].getBoundingClientRect().top + window.scrollY - 20)", canvas)
        rect = d.execute_script(
            "var ev=DTS.runs[0].ranks[0].byId[arguments[0]]; return DTS.view.boxRect(ev);", str(target["args"]["id"]))
        cw, ch = canvas.size["width"], canvas.size["height"]
        x, y = rect["x"] + min(rect["w"] / 2, 5) - cw / 2, rect["y"] + rect["h"] / 2 - ch / 2
        before = d.execute_script("return DTS.view.times(DTS.runs[0].ranks[0].byId[arguments[0]])[0];",
                                  str(target["args"]["id"]))
        prev = ags[-2]
        px = d.execute_script("return DTS.view.boxRect(DTS.runs[0].ranks[0].byId[arguments[0]]).x;", str(prev["args"]["id"]))
        dx = int(px - rect["x"] - 3)  # onto the previous all-gather's start: a reorder
        ActionChains(d).move_to_element_with_offset(canvas, x, y).click_and_hold() \
            .move_by_offset(dx // 2, 0).move_by_offset(dx - dx // 2, 0).release().perform()
        err = d.find_element("id", "wi-err").text
        if err:
            sys.exit(f"FAIL: the page refused the move: {err}")
        mv = d.find_element("id", "wi-move")
        if mv.get_attribute("data-id") != str(target["args"]["id"]):
            sys.exit(f"FAIL: the drag did not move all-gather {target['args']['id']} ({mv.text})")
        t = float(mv.get_attribute("data-t"))
        want, want_ov, crit, starts = whatif(runs[0][1], k, [(0, target["args"]["id"], t)])
        got = float(d.find_element("id", "wi-step").get_attribute("data-value"))
        got_ov = float(d.find_element("id", "wi-overlap").get_attribute("data-value"))
        close(got, want, "what-if step time after the drag")
        close(got_ov, want_ov, "what-if overlap after the drag")
        check_critical(d, crit)
        now = d.execute_script("return DTS.view.times(DTS.runs[0].ranks[0].byId[arguments[0]])[0];",
                               str(target["args"]["id"]))
        close(now, starts[(0, target["args"]["id"])], "the dragged all-gather's new start")
        if not (t < before and now < before):
            sys.exit(f"FAIL: dragged left, the all-gather did not move earlier ({before} -> {t}, {now})")
        print(f"what-if: all_gather {target['args']['id']} moved {before:.1f} -> {t:.1f}: step "
              f"{base:.2f} -> {got:.2f} us (computed {want:.2f}), overlap {got_ov:.2f} us")
        # The knobs: NVLink's alpha-beta collectives, compute projected onto a GPU (the typed
        # machine rate over the peak at the efficiency).
        Select(d.find_element("id", "wi-net")).select_by_value("nvlink")
        for i, v in (("wi-gflops", "40"), ("wi-peak", "989"), ("wi-eff", "40")):
            box = d.find_element("id", i)
            box.clear()
            box.send_keys(v + "\t")
        d.find_element("id", "wi-gpu").click()
        scale = 40 / (989 * 1000 * 0.40)
        want, want_ov, crit, _ = whatif(runs[0][1], k, [(0, target["args"]["id"], t)], (3.0, 370.0), scale)
        close(float(d.find_element("id", "wi-step").get_attribute("data-value")), want, "projected step time")
        close(float(d.find_element("id", "wi-overlap").get_attribute("data-value")), want_ov, "projected overlap")
        check_critical(d, crit)
        print(f"projected on NVLink and a GPU at 40 % of 989 TFLOP/s: step {want:.2f} us")
        if args.screenshot:
            d.find_element("id", "arrows").click()
            d.save_screenshot(args.screenshot)

        # The older schema: no ids, deps or steps.
        legacy = fx.legacy_run(args.seed, 2)
        fx.write(f"{tmp}/old.json", [e for r in legacy for e in r])
        # The older schema, alone and next to a run in the full one.
        subprocess.run([args.tool, "studio", "-o", f"{tmp}/old.html", f"{tmp}/old.json"], check=True)
        open_page(d, f"{tmp}/old.html")
        check_table(d, [("old", load([e for r in legacy for e in r]))])
        subprocess.run([args.tool, "studio", "-o", f"{tmp}/mixed.html", f"{tmp}/old.json", f"{tmp}/a.json"], check=True)
        open_page(d, f"{tmp}/mixed.html")
        check_table(d, [("old", load([e for r in legacy for e in r])), runs[0]])
    finally:
        d.quit()
    print("studio page: tables, zoom and what-if agree with the trace")


if __name__ == "__main__":
    main()
