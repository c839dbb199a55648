#!/usr/bin/env python3
"""dtensor-trace studio on a run of PyTorch profiler traces: it converts them itself, and the
page's run holds exactly the events dtensor-trace-torch writes for the same files, next to a
dtensor run. Usage: test_studio_torch.py DTENSOR_TRACE DTENSOR_TRACE_TORCH FIXTURE_DIR"""
import json
import os
import subprocess
import sys
import tempfile

trace, torch_tool, fixture = sys.argv[1:4]
files = [os.path.join(fixture, f"tp2_rank{r}.json.gz") for r in (0, 1)]
with tempfile.TemporaryDirectory() as tmp:
    converted = os.path.join(tmp, "torch.json")
    subprocess.run([torch_tool, "-o", converted] + files, check=True)
    with open(converted) as f:
        want = json.load(f)
    want = want["traceEvents"] if isinstance(want, dict) else want
    # A dtensor run beside it: the converted file read as one of ours.
    page = os.path.join(tmp, "page.html")
    subprocess.run([trace, "studio", "-o", page, "torch=" + ",".join(files), "mine=" + converted],
                   check=True)
    text = open(page).read()
    head = '<script type="application/json" id="dt-runs">'
    body = text[text.index(head) + len(head):]
    runs = json.loads(body[:body.index("</script>")])
    assert [r["name"] for r in runs] == ["torch", "mine"], [r["name"] for r in runs]
    key = lambda e: (e.get("pid"), e.get("tid"), e.get("ts"), e.get("name"))
    got = sorted((key(e) for e in runs[0]["events"] if e.get("ph") == "X"), key=str)
    exp = sorted((key(e) for e in want if e.get("ph") == "X"), key=str)
    assert got == exp, f"{len(got)} events in the page's torch run, {len(exp)} converted"
    assert len(got) > 1000, len(got)
    # Not a torch trace and not ours: the message names the file.
    bad = os.path.join(tmp, "bad.json")
    open(bad, "w").write('{"schemaVersion": 1, "traceEvents": 3}')
    r = subprocess.run([trace, "studio", "-o", page, bad], capture_output=True, text=True)
    assert r.returncode != 0 and "bad.json" in r.stderr, (r.returncode, r.stderr)
print(f"ok: {len(got)} events of the PyTorch run converted inside dtensor-trace studio")
