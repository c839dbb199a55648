/* What-if: one step of one run rescheduled after the user moves compute boxes or collectives,
 * with collectives rescaled by an alpha-beta model and compute by a FLOP-rate ratio. The model
 * is the one docs/tracing.md states (and tests/tools/test_studio.py recomputes). */
'use strict';
var DTS = (window.DTS = window.DTS || {});

/* Bus-bandwidth presets in GB/s and alpha (latency per algorithm step) in microseconds. */
DTS.NET_PRESETS = {
  recorded: { label: 'as recorded (this machine)' },
  nvlink: { label: 'NVLink (370 GB/s, 3 µs)', bw: 370, alpha: 3 },
  ib50: { label: 'InfiniBand 400G (50 GB/s per GPU, 8 µs)', bw: 50, alpha: 8 },
  ib25: { label: 'InfiniBand 200G (25 GB/s per GPU, 10 µs)', bw: 25, alpha: 10 },
};

/* A collective's algorithm steps and the fraction of its bytes each rank moves (ring). */
DTS.collShape = function (kind, n) {
  if (n <= 1) return { steps: 0, frac: 0 };
  if (kind === 'all_reduce') return { steps: 2 * (n - 1), frac: (2 * (n - 1)) / n };
  if (kind === 'all_gather' || kind === 'reduce_scatter' || kind === 'all_to_all')
    return { steps: n - 1, frac: (n - 1) / n };
  return { steps: 1, frac: 1 };
};

/* The events rescheduled for step k: per rank, the rank thread's stream (lanes 1 and 2) and
 * the comm thread's (lane 4), each event starting in the rank's step span, in recorded order,
 * with the host time recorded before each (its gap). */
DTS.buildPlan = function (run, k) {
  var plan = { run: run, k: k, streams: [], inSet: new Set(), gap: new Map(), moved: new Map(),
               streamOf: new Map(), ranks: [] };
  run.ranks.forEach(function (r) {
    var w = r.steps[k];
    if (!w) return;
    var inW = function (ev) { return ev.ts >= w.start && ev.ts < w.end; };
    var rank = { r: r, w: w, lastEnd: w.start };
    [[1, 2], [4]].forEach(function (tids) {
      var evs = [];
      tids.forEach(function (t) { (r.lanes[t] || []).forEach(function (ev) { if (inW(ev)) evs.push(ev); }); });
      evs.sort(function (a, b) { return a.ts - b.ts || a.tid - b.tid; });
      var s = { rank: rank, evs: evs };
      evs.forEach(function (ev, i) {
        plan.gap.set(ev, ev.ts - (i ? evs[i - 1].end : w.start));
        plan.inSet.add(ev);
        plan.streamOf.set(ev, s);
        rank.lastEnd = Math.max(rank.lastEnd, ev.end);
      });
      plan.streams.push(s);
    });
    rank.tail = w.end - rank.lastEnd; /* host time after the last event (kept) */
    plan.ranks.push(rank);
  });
  return plan;
};

/* Durations under the knobs: opts.net (a NET_PRESETS key or {bw, alpha}), opts.computeScale. */
function durations(plan, opts) {
  var d = new Map(), net = opts.net && opts.net.bw ? opts.net : null;
  plan.inSet.forEach(function (ev) {
    if (!DTS.isColl(ev)) { d.set(ev, ev.dur * (opts.computeScale || 1)); return; }
    var members = ev.inst ? plan.run.instances[ev.inst].filter(function (m) { return plan.inSet.has(m); }) : [ev];
    var base = Math.min.apply(null, members.map(function (m) { return m.dur; }));
    var bytes = Math.max.apply(null, members.map(DTS.collBytes));
    if (net && bytes > 0) {
      var sh = DTS.collShape(ev.args.kind || ev.name, +ev.args.group_size || members.length);
      base = sh.steps * net.alpha + (sh.frac * bytes) / (net.bw * 1e3); /* GB/s = 1e3 B/µs */
    }
    d.set(ev, base);
  });
  return d;
}

/* Schedules the plan: an event starts at the latest of its stream predecessor's end plus its
 * recorded gap (a moved event: no gap), the ends of its deps, and its moved "not before"
 * time; a collective instance starts on all its members at once, at their latest ready time.
 * Returns starts, ends, each event's binding predecessor (the critical path) and the figures. */
DTS.schedule = function (plan, opts) {
  var dur = durations(plan, opts || {}), start = new Map(), end = new Map(), ready = new Map();
  var bind = new Map(), pos = plan.streams.map(function () { return 0; });
  var progress = true;
  while (progress) {
    progress = false;
    plan.streams.forEach(function (s, si) {
      while (pos[si] < s.evs.length) {
        var ev = s.evs[pos[si]];
        if (!end.has(ev)) {
          if (!ready.has(ev)) {
            var p = pos[si] ? s.evs[pos[si] - 1] : null, b = p;
            var t = (p ? end.get(p) : s.rank.w.start) + (plan.moved.has(ev) ? 0 : plan.gap.get(ev));
            var blocked = false;
            ev.producers.forEach(function (q) {
              if (plan.inSet.has(q) && !end.has(q)) { blocked = true; return; }
              var qe = plan.inSet.has(q) ? end.get(q) : q.end;
              if (qe > t) { t = qe; b = q; }
            });
            if (blocked) return;
            if (plan.moved.has(ev) && plan.moved.get(ev) > t) { t = plan.moved.get(ev); b = 'moved'; }
            ready.set(ev, t);
            bind.set(ev, b);
          }
          var members = ev.inst ? plan.run.instances[ev.inst].filter(function (m) { return plan.inSet.has(m); }) : [ev];
          if (!members.every(function (m) { return ready.has(m); })) return;
          var last = members.reduce(function (a, m) { return ready.get(m) > ready.get(a) ? m : a; }, members[0]);
          members.forEach(function (m) {
            start.set(m, ready.get(last));
            end.set(m, ready.get(last) + dur.get(m));
            if (m !== last && ready.get(m) < ready.get(last)) bind.set(m, last);
          });
        }
        pos[si]++;
        progress = true;
      }
    });
  }
  var stuck = plan.streams.filter(function (s, si) { return pos[si] < s.evs.length; });
  if (stuck.length)
    return { error: 'no schedule: "' + stuck[0].evs[pos[plan.streams.indexOf(stuck[0])]].name +
             '" waits on an event that waits on it' };
  var res = { start: start, end: end, bind: bind, stepTime: 0, overlap: 0, critical: new Set() };
  var worst = null, worstEv = null;
  plan.ranks.forEach(function (rk) {
    var last = null, comp = [], comm = [];
    plan.streams.forEach(function (s) {
      if (s.rank !== rk) return;
      s.evs.forEach(function (ev) {
        if (!last || end.get(ev) > end.get(last)) last = ev;
        (DTS.isColl(ev) ? comm : comp).push([start.get(ev), end.get(ev)]);
      });
    });
    var span = (last ? end.get(last) : rk.w.start) + rk.tail - rk.w.start;
    rk.newSpan = span;
    if (worst === null || span > worst) { worst = span; worstEv = last; }
    res.overlap += DTS.overlapLen(DTS.union(comp), DTS.union(comm)) / plan.ranks.length;
  });
  res.stepTime = worst || 0;
  for (var e = worstEv; e && e !== 'moved'; e = bind.get(e)) res.critical.add(e);
  return res;
};

/* Moves ev to not-before time t: in its stream it goes before the first other event that
 * starts after t (in the current schedule sched), but never before an event it depends on
 * (through deps, transitively) nor after one that depends on it. A collective moves with
 * every member of its instance (each rank of the group), as ranks must issue collectives in
 * one order. */
DTS.moveEvent = function (plan, sched, ev, t) {
  var members = ev.inst ? plan.run.instances[ev.inst].filter(function (m) { return plan.inSet.has(m); }) : [ev];
  members.forEach(function (m) { moveOne(plan, sched, m, t); });
};

function moveOne(plan, sched, ev, t) {
  var s = plan.streamOf.get(ev);
  if (!s) return;
  var rest = s.evs.filter(function (e) { return e !== ev; });
  var at = rest.findIndex(function (e) { return sched.start.get(e) > t; });
  if (at < 0) at = rest.length;
  var up = reach(ev, 'producers'), down = reach(ev, 'consumers');
  rest.forEach(function (e, i) {
    if (up.has(e) && at <= i) at = i + 1;
  });
  for (var i = rest.length - 1; i >= 0; i--) if (down.has(rest[i]) && at > i) at = i;
  rest.splice(at, 0, ev);
  s.evs = rest;
  plan.moved.set(ev, t);
}

function reach(ev, dir) {
  var seen = new Set(), stack = [ev];
  while (stack.length) {
    stack.pop()[dir].forEach(function (q) { if (!seen.has(q)) { seen.add(q); stack.push(q); } });
  }
  return seen;
}
