/* The studio's data: runs parsed from the embedded Chrome trace events (ranks, lanes, steps,
 * ids and deps, collectives matched across ranks by communicator (or group) and seq) and the comparison table's
 * per-step figures as docs/tracing.md defines them. Nothing here draws. */
'use strict';
var DTS = (window.DTS = window.DTS || {});

/* Lanes in the order the page draws them; tid 5 (steps) is read, not drawn. */
DTS.LANES = [
  { tid: 0, name: 'ops' },
  { tid: 1, name: 'compute' },
  { tid: 2, name: 'comm' },
  { tid: 4, name: 'comm thread' },
  { tid: 3, name: 'pipeline' },
];
DTS.isColl = function (ev) { return ev.tid === 2 || ev.tid === 4; };

/* The bytes a collective moves: its larger buffer (an all-gather's output, a
 * reduce-scatter's input); 0 where the trace does not say. */
DTS.collBytes = function (ev) {
  return Math.max(+ev.args.bytes_in || 0, +ev.args.bytes_out || 0);
};

/* Traces written before collectives carried their own args say them in the detail text
 * ("group tp of 2, 65536 B in, 131072 B out"): the kind is the event's name; no seq, so such
 * a collective is an instance of its own. */
DTS.olderCollArgs = function (name, a) {
  var m = /^group (\S+) of (\d+), (\d+) B in, (\d+) B out/.exec(a.detail || '');
  if (!m) return a;
  var out = Object.assign({}, a);
  out.kind = name;
  out.group_size = +m[2];
  out.bytes_in = +m[3];
  out.bytes_out = +m[4];
  out.group_label = m[1]; /* not "group": that, with seq, would match ranks' collectives */
  return out;
};

DTS.parseRun = function (raw, index) {
  var run = { name: raw.name, files: raw.files, index: index, ranks: [], gflops: null,
              layout: '', instances: {}, stepIds: [], hasDeps: false };
  var byPid = {};
  function rankOf(pid) {
    if (!byPid[pid]) {
      byPid[pid] = { pid: pid, run: run, lanes: {}, events: [], byId: {}, steps: {}, name: 'rank ' + pid };
      run.ranks.push(byPid[pid]);
    }
    return byPid[pid];
  }
  var synth = 0;
  raw.events.forEach(function (e) {
    var a = e.args || {};
    if (e.ph === 'M') {
      if (e.name === 'dt_run') {
        if (a.gflops > 0) run.gflops = +a.gflops;
        if (a.layout) run.layout = String(a.layout);
      } else if (e.name === 'process_name' && a.name) rankOf(e.pid).name = String(a.name);
      return;
    }
    if (e.ph !== 'X') return;
    var r = rankOf(e.pid), tid = e.tid | 0;
    if (tid === 5) {
      if (e.name === 'step') r.steps[a.step] = { start: +e.ts, end: +e.ts + +e.dur };
      return;
    }
    if ((tid === 2 || tid === 4) && a.kind === undefined) a = DTS.olderCollArgs(e.name, a);
    var id = a.id !== undefined && a.id !== null ? String(a.id) : 'x' + synth++;
    var ev = { name: String(e.name), ts: +e.ts, dur: +e.dur, end: +e.ts + +e.dur, tid: tid,
               args: a, id: id, deps: Array.isArray(a.deps) ? a.deps.map(String) : [],
               rank: r, consumers: [], producers: [] };
    if (ev.deps.length) run.hasDeps = true;
    (r.lanes[tid] = r.lanes[tid] || []).push(ev);
    r.events.push(ev);
    r.byId[id] = ev;
  });
  run.ranks.sort(function (a, b) { return a.pid - b.pid; });
  var steps = {};
  run.ranks.forEach(function (r) {
    Object.keys(r.lanes).forEach(function (t) {
      var l = r.lanes[t];
      l.sort(function (a, b) { return a.ts - b.ts; });
      l.maxDur = l.reduce(function (m, e) { return Math.max(m, e.dur); }, 0);
    });
    r.events.forEach(function (ev) {
      ev.deps.forEach(function (d) {
        var p = r.byId[d];
        if (p) { p.consumers.push(ev); ev.producers.push(p); }
      });
      /* One collective on every member: the communicator's id (comm) and its sequence
       * number; traces without comm ids (PyTorch's) match by group label. Sends and receives
       * count per rank, so they are not matched. */
      var g = ev.args.comm || ev.args.group, s = ev.args.seq;
      var p2p = ev.name === 'send' || ev.name === 'recv';
      if (DTS.isColl(ev) && !p2p && g !== undefined && g !== '' && s !== undefined && s !== null) {
        ev.inst = g + '#' + s;
        (run.instances[ev.inst] = run.instances[ev.inst] || []).push(ev);
      }
    });
    /* Without step records the whole trace is one step, spanning the rank's events. */
    if (!Object.keys(r.steps).length && r.events.length) {
      var s0 = Infinity, e0 = -Infinity;
      r.events.forEach(function (ev) { s0 = Math.min(s0, ev.ts); e0 = Math.max(e0, ev.end); });
      r.steps[0] = { start: s0, end: e0 };
    }
    Object.keys(r.steps).forEach(function (k) { steps[k] = 1; });
  });
  run.stepIds = Object.keys(steps).map(Number).sort(function (a, b) { return a - b; });
  return run;
};

/* Interval arithmetic on sorted, merged lists of [start, end]. */
DTS.union = function (ivs) {
  var s = ivs.slice().sort(function (a, b) { return a[0] - b[0]; }), out = [];
  s.forEach(function (iv) {
    if (out.length && iv[0] <= out[out.length - 1][1])
      out[out.length - 1][1] = Math.max(out[out.length - 1][1], iv[1]);
    else out.push([iv[0], iv[1]]);
  });
  return out;
};
/* The first index of a sorted array whose key is >= t. */
DTS.lowerBound = function (arr, t, key) {
  var lo = 0, hi = arr.length;
  while (lo < hi) {
    var mid = (lo + hi) >> 1;
    if (key(arr[mid]) < t) lo = mid + 1; else hi = mid;
  }
  return lo;
};
/* u clipped to [s, e]; u is merged, so its ends are sorted too. */
DTS.clip = function (u, s, e) {
  var out = [];
  for (var i = DTS.lowerBound(u, s, function (iv) { return iv[1]; }); i < u.length && u[i][0] < e; i++)
    if (Math.min(u[i][1], e) > Math.max(u[i][0], s)) out.push([Math.max(u[i][0], s), Math.min(u[i][1], e)]);
  return out;
};
DTS.total = function (u) { return u.reduce(function (t, iv) { return t + iv[1] - iv[0]; }, 0); };
DTS.overlapLen = function (a, b) {
  var i = 0, j = 0, t = 0;
  while (i < a.length && j < b.length) {
    var s = Math.max(a[i][0], b[j][0]), e = Math.min(a[i][1], b[j][1]);
    if (e > s) t += e - s;
    if (a[i][1] < b[j][1]) i++; else j++;
  }
  return t;
};

function spans(r, tids, pred) {
  var out = [];
  tids.forEach(function (t) {
    (r.lanes[t] || []).forEach(function (ev) { if (!pred || pred(ev)) out.push([ev.ts, ev.end]); });
  });
  return DTS.union(out);
}

/* One step's figures for a run (docs/tracing.md, "The comparison table"): the step time is the
 * ranks' maximum step span; the others are means over the ranks that ran the step. */
function unions(r) { /* per rank, once: every step clips the same unions */
  if (!r.unions)
    r.unions = { comp: spans(r, [1]), comm: spans(r, [2, 4]),
                 idle: spans(r, [3], function (ev) { return ev.name === 'idle'; }),
                 busy: spans(r, [3], function (ev) { return ev.name !== 'idle'; }) };
  return r.unions;
}

DTS.stepMetrics = function (run, k) {
  var m = { time: 0, compute: 0, comm: 0, overlap: 0, exposed: 0, bubble: null, colls: 0, bytes: 0 };
  var n = 0, nb = 0, bub = 0;
  run.ranks.forEach(function (r) {
    var w = r.steps[k];
    if (!w) return;
    n++;
    m.time = Math.max(m.time, w.end - w.start);
    var u = unions(r), comp = DTS.clip(u.comp, w.start, w.end), comm = DTS.clip(u.comm, w.start, w.end);
    var ov = DTS.overlapLen(comp, comm);
    m.compute += DTS.total(comp);
    m.comm += DTS.total(comm);
    m.overlap += ov;
    m.exposed += DTS.total(comm) - ov;
    [2, 4].forEach(function (t) {
      var l = r.lanes[t] || [];
      for (var i = DTS.lowerBound(l, w.start, function (ev) { return ev.ts; }); i < l.length && l[i].ts < w.end; i++) {
        m.colls++;
        m.bytes += DTS.collBytes(l[i]);
      }
    });
    if (r.lanes[3]) {
      var idle = DTS.total(DTS.clip(u.idle, w.start, w.end)), busy = DTS.total(DTS.clip(u.busy, w.start, w.end));
      if (idle + busy > 0) { bub += idle / (idle + busy); nb++; }
    }
  });
  if (!n) return null;
  ['compute', 'comm', 'overlap', 'exposed', 'colls', 'bytes'].forEach(function (f) { m[f] /= n; });
  m.bubble = nb ? bub / nb : null;
  return m;
};

/* The table row: each figure averaged over the steps after the first (the first warms up),
 * or the only step. */
DTS.FIELDS = ['time', 'compute', 'comm', 'overlap', 'exposed', 'bubble', 'colls', 'bytes'];
DTS.runSummary = function (run) {
  var ks = run.stepIds.length > 1 ? run.stepIds.slice(1) : run.stepIds, sum = {}, cnt = {};
  ks.forEach(function (k) {
    var m = DTS.stepMetrics(run, k);
    if (!m) return;
    DTS.FIELDS.forEach(function (f) {
      if (m[f] === null) return;
      sum[f] = (sum[f] || 0) + m[f];
      cnt[f] = (cnt[f] || 0) + 1;
    });
  });
  var out = { steps: ks.length };
  DTS.FIELDS.forEach(function (f) { out[f] = cnt[f] ? sum[f] / cnt[f] : null; });
  return out;
};

/* Where step k starts in a run: its earliest rank's step start (the page's time 0). */
DTS.stepOrigin = function (run, k) {
  var t = Infinity;
  run.ranks.forEach(function (r) { if (r.steps[k]) t = Math.min(t, r.steps[k].start); });
  return isFinite(t) ? t : 0;
};
DTS.stepEnd = function (run, k) {
  var t = -Infinity;
  run.ranks.forEach(function (r) { if (r.steps[k]) t = Math.max(t, r.steps[k].end); });
  return isFinite(t) ? t : 0;
};
