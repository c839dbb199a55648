/* The timeline canvas: runs stacked, each rank's lanes as rows, step k of every run aligned at
 * time 0; zoom (wheel, buttons), pan (drag on the axis or empty space, the scrollbar), hover
 * details, dependency arrows, and dragging boxes for the what-if. Draws only what is visible. */
'use strict';
var DTS = (window.DTS = window.DTS || {});

var GUTTER = 170, AXIS = 26, ROW = 18, HEAD = 22;
var KIND_COLORS = { all_gather: '#3b7dd8', reduce_scatter: '#e08a1e', all_reduce: '#d6453d',
                    all_to_all: '#8e5bc4', send: '#4a9d7c', recv: '#4a9d7c', broadcast: '#b0a02a' };

DTS.View = function (canvas, runs, hooks) {
  this.c = canvas;
  this.runs = runs;
  this.hooks = hooks;
  this.k = 0;
  this.t0 = 0;
  this.t1 = 1;
  this.selected = null;
  this.allArrows = false;
  this.whatif = null; /* {run, plan, sched} */
  this.drawn = 0;
  this.listen();
};

DTS.View.prototype.setStep = function (k) {
  this.k = k;
  /* a run without step k (an older trace: one step) shows its first step there */
  var ks = this.runs.map(function (r) { return r.stepIds.indexOf(k) >= 0 ? k : r.stepIds[0]; });
  this.origins = this.runs.map(function (r, i) { return DTS.stepOrigin(r, ks[i]); });
  this.span = Math.max.apply(null, this.runs.map(function (r, i) { return DTS.stepEnd(r, ks[i]) - this.origins[i]; }, this));
  this.fit();
};
DTS.View.prototype.fit = function () { this.t0 = 0; this.t1 = Math.max(this.span, 1); this.draw(); };
DTS.View.prototype.zoom = function (f, atX) {
  var w = this.c.clientWidth - GUTTER, x = atX === undefined ? w / 2 : atX - GUTTER;
  var t = this.t0 + ((this.t1 - this.t0) * x) / w, len = (this.t1 - this.t0) / f;
  if (len < 0.01) return;
  this.t0 = t - (len * x) / w;
  this.t1 = this.t0 + len;
  this.draw();
};
DTS.View.prototype.pan = function (dt) { this.t0 += dt; this.t1 += dt; this.draw(); };

/* Rows: a header per run, then each rank's lanes that hold events. */
DTS.View.prototype.layout = function () {
  var rows = [], y = AXIS;
  this.runs.forEach(function (run, ri) {
    rows.push({ head: true, run: run, ri: ri, y: y });
    y += HEAD;
    run.ranks.forEach(function (r) {
      DTS.LANES.forEach(function (l) {
        if (!r.lanes[l.tid]) return;
        rows.push({ run: run, ri: ri, rank: r, tid: l.tid, lane: l.name, y: y });
        y += ROW;
      });
    });
  });
  this.rows = rows;
  return y + 4;
};

DTS.View.prototype.x = function (ri, t) {
  return GUTTER + ((t - this.origins[ri] - this.t0) * (this.c.clientWidth - GUTTER)) / (this.t1 - this.t0);
};
/* An event's drawn span: its what-if times when rescheduled, else its recorded ones. */
DTS.View.prototype.times = function (ev) {
  var w = this.whatif;
  if (w && w.sched && w.sched.start && w.sched.start.has(ev)) return [w.sched.start.get(ev), w.sched.end.get(ev)];
  return [ev.ts, ev.end];
};
DTS.View.prototype.rowOf = function (ev) {
  for (var i = 0; i < this.rows.length; i++)
    if (this.rows[i].rank === ev.rank && this.rows[i].tid === ev.tid) return this.rows[i];
  return null;
};

/* Events of a row overlapping [a, b] in trace time. */
DTS.View.prototype.visible = function (row, a, b, fn) {
  var lane = row.rank.lanes[row.tid], w = this.whatif;
  if (w && w.run === row.run && w.sched && w.sched.start && (row.tid === 1 || row.tid === 2 || row.tid === 4)) {
    for (var j = 0; j < lane.length; j++) {
      var tt = this.times(lane[j]);
      if (tt[1] >= a && tt[0] <= b) fn(lane[j], tt);
    }
    return;
  }
  var lo = 0, hi = lane.length, from = a - lane.maxDur;
  while (lo < hi) {
    var mid = (lo + hi) >> 1;
    if (lane[mid].ts < from) lo = mid + 1; else hi = mid;
  }
  for (var i = lo; i < lane.length && lane[i].ts <= b; i++)
    if (lane[i].end >= a) fn(lane[i], [lane[i].ts, lane[i].end]);
};

DTS.View.prototype.color = function (ev) {
  if (DTS.isColl(ev)) return KIND_COLORS[ev.args.kind || ev.name] || '#c9772b';
  if (ev.tid === 1) return '#5a9e4b';
  if (ev.tid === 3) return ev.name === 'idle' ? '#dddddd' : '#3aa0a0';
  return '#8c96a6';
};
DTS.View.prototype.label = function (ev) {
  var op = ev.args.op || ev.name, mod = ev.args.module;
  return mod ? op + ' · ' + mod : op;
};

DTS.View.prototype.draw = function () {
  var c = this.c, dpr = window.devicePixelRatio || 1, h = this.layout(), wd = c.clientWidth;
  c.style.height = h + 'px';
  c.width = wd * dpr;
  c.height = h * dpr;
  var g = c.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, wd, h);
  g.font = '11px sans-serif';
  g.textBaseline = 'middle';
  this.drawAxis(g, wd, h);
  var self = this, drawn = 0, crit = this.whatif && this.whatif.sched && this.whatif.sched.critical;
  this.rows.forEach(function (row) {
    if (row.head) {
      g.fillStyle = '#eef1f6';
      g.fillRect(0, row.y, wd, HEAD);
      g.fillStyle = '#222';
      g.font = 'bold 12px sans-serif';
      g.fillText(row.run.name + (self.whatif && self.whatif.run === row.run ? '  (what-if)' : ''), 6, row.y + HEAD / 2);
      g.font = '11px sans-serif';
      return;
    }
    g.fillStyle = '#444';
    if (row.rank.lanes && row === self.firstRow(row.rank)) g.fillText(row.rank.name, 6, row.y + ROW / 2);
    g.fillStyle = '#888';
    g.fillText(row.lane, 80, row.y + ROW / 2);
    g.save();
    g.beginPath();
    g.rect(GUTTER, row.y, wd - GUTTER, ROW);
    g.clip();
    var o = self.origins[row.ri], a = o + self.t0, b = o + self.t1, lastPx = -1;
    self.visible(row, a, b, function (ev, tt) {
      var x0 = self.x(row.ri, tt[0]), x1 = Math.max(self.x(row.ri, tt[1]), x0 + 1);
      /* zoomed out, boxes under a pixel that fall in the last drawn pixel add nothing */
      if (x1 - x0 <= 1 && Math.floor(x0) <= lastPx && ev !== self.selected && !(crit && crit.has(ev))) return;
      lastPx = Math.floor(x1);
      g.fillStyle = self.color(ev);
      g.fillRect(x0, row.y + 2, x1 - x0, ROW - 4);
      if (crit && crit.has(ev)) { g.strokeStyle = '#e0007a'; g.lineWidth = 2; g.strokeRect(x0, row.y + 2, x1 - x0, ROW - 4); }
      if (ev === self.selected) { g.strokeStyle = '#000'; g.lineWidth = 2; g.strokeRect(x0, row.y + 1, x1 - x0, ROW - 2); }
      if (x1 - x0 > 30) { /* as many characters as fit (about 6 px each) */
        var lx = Math.max(x0, GUTTER), fit = Math.floor((x1 - lx - 4) / 6), lab = self.label(ev);
        g.fillStyle = '#fff';
        if (fit > 1) g.fillText(lab.length > fit ? lab.slice(0, fit - 1) + '…' : lab, lx + 2, row.y + ROW / 2);
      }
      drawn++;
    });
    g.restore();
  });
  this.drawSteps(g, h);
  this.drawArrows(g);
  if (this.ghost) { /* the box being dragged, where it would go */
    var gr = this.boxRect(this.ghost.ev), dx = (this.ghost.dt * (wd - GUTTER)) / (this.t1 - this.t0);
    g.strokeStyle = '#000';
    g.setLineDash([3, 2]);
    if (gr) g.strokeRect(gr.x + dx, gr.y, gr.w, gr.h);
    g.setLineDash([]);
  }
  this.drawn = drawn;
  c.dataset.t0 = this.t0;
  c.dataset.t1 = this.t1;
  c.dataset.drawn = drawn;
  if (this.hooks.drawn) this.hooks.drawn(this);
};

DTS.View.prototype.firstRow = function (r) {
  for (var i = 0; i < this.rows.length; i++) if (this.rows[i].rank === r) return this.rows[i];
  return null;
};

DTS.View.prototype.drawAxis = function (g, wd, h) {
  var span = this.t1 - this.t0, step = Math.pow(10, Math.floor(Math.log10(span / 8)));
  if (span / step > 16) step *= 5; else if (span / step > 8) step *= 2;
  g.fillStyle = '#f7f7f7';
  g.fillRect(GUTTER, 0, wd - GUTTER, AXIS);
  g.fillStyle = '#333';
  var ms = step >= 1000;
  g.fillText((ms ? 'ms' : 'µs') + ' from step ' + this.k + ' start', 6, AXIS / 2);
  for (var t = Math.ceil(this.t0 / step) * step; t <= this.t1; t += step) {
    var x = GUTTER + ((t - this.t0) * (wd - GUTTER)) / span;
    g.fillStyle = '#eee';
    g.fillRect(x, AXIS, 1, h - AXIS);
    g.fillStyle = '#333';
    g.fillText(+(ms ? t / 1000 : t).toPrecision(6) + '', x + 2, AXIS / 2);
  }
};

/* Each rank's step boundaries, as dashed lines over its rows. */
DTS.View.prototype.drawSteps = function (g) {
  var self = this;
  g.save();
  g.beginPath();
  g.rect(GUTTER, AXIS, this.c.clientWidth - GUTTER, this.c.clientHeight);
  g.clip();
  g.strokeStyle = '#c03';
  g.setLineDash([4, 3]);
  g.lineWidth = 1;
  this.runs.forEach(function (run, ri) {
    run.ranks.forEach(function (r) {
      var rows = self.rows.filter(function (row) { return row.rank === r; });
      if (!rows.length) return;
      var y0 = rows[0].y, y1 = rows[rows.length - 1].y + ROW;
      Object.keys(r.steps).forEach(function (k) {
        [r.steps[k].start, r.steps[k].end].forEach(function (t) {
          var x = self.x(ri, t);
          g.beginPath(); g.moveTo(x, y0); g.lineTo(x, y1); g.stroke();
        });
      });
    });
  });
  g.restore();
};

/* Arrows from a collective (or any producer) to the events that list it in deps: for the
 * selected event, or for every visible collective when "all arrows" is on. */
DTS.View.prototype.drawArrows = function (g) {
  var self = this, pairs = [];
  if (this.selected) {
    this.selected.consumers.forEach(function (q) { pairs.push([self.selected, q]); });
    this.selected.producers.forEach(function (p) { pairs.push([p, self.selected]); });
  }
  if (this.allArrows) {
    this.rows.forEach(function (row) {
      if (row.head || (row.tid !== 2 && row.tid !== 4)) return;
      var o = self.origins[row.ri];
      self.visible(row, o + self.t0, o + self.t1, function (ev) {
        if (pairs.length < 3000) ev.consumers.forEach(function (q) { pairs.push([ev, q]); });
      });
    });
  }
  g.save();
  g.beginPath();
  g.rect(GUTTER, AXIS, this.c.clientWidth - GUTTER, this.c.clientHeight);
  g.clip();
  g.strokeStyle = g.fillStyle = 'rgba(20,20,20,0.75)';
  g.lineWidth = 1.2;
  pairs.forEach(function (pq) {
    var ra = self.rowOf(pq[0]), rb = self.rowOf(pq[1]);
    if (!ra || !rb) return;
    var x0 = self.x(ra.ri, self.times(pq[0])[1]), y0 = ra.y + ROW / 2;
    var x1 = self.x(rb.ri, self.times(pq[1])[0]), y1 = rb.y + ROW / 2;
    g.beginPath();
    g.moveTo(x0, y0);
    g.bezierCurveTo(x0 + 20, y0, x1 - 20, y1, x1, y1);
    g.stroke();
    g.beginPath();
    g.moveTo(x1, y1); g.lineTo(x1 - 6, y1 - 3); g.lineTo(x1 - 6, y1 + 3);
    g.fill();
  });
  g.restore();
};

/* The event under canvas point (x, y), or null. */
DTS.View.prototype.hit = function (x, y) {
  var row = null;
  this.rows.forEach(function (r) { if (!r.head && y >= r.y && y < r.y + ROW) row = r; });
  if (!row || x < GUTTER) return null;
  var self = this, o = this.origins[row.ri], px = (this.t1 - this.t0) / (this.c.clientWidth - GUTTER);
  var t = o + this.t0 + (x - GUTTER) * px, best = null;
  this.visible(row, t - 2 * px, t + 2 * px, function (ev, tt) {
    if (!best || tt[1] - tt[0] < self.times(best)[1] - self.times(best)[0]) best = ev;
  });
  return best;
};

/* Where an event's box is, in canvas pixels (for tests and the tooltip). */
DTS.View.prototype.boxRect = function (ev) {
  var row = this.rowOf(ev), tt = this.times(ev);
  if (!row) return null;
  var x0 = this.x(row.ri, tt[0]);
  return { x: x0, y: row.y + 2, w: Math.max(this.x(row.ri, tt[1]) - x0, 1), h: ROW - 4 };
};

DTS.View.prototype.listen = function () {
  var self = this, c = this.c, drag = null;
  function pt(e) { var b = c.getBoundingClientRect(); return { x: e.clientX - b.left, y: e.clientY - b.top }; }
  c.addEventListener('wheel', function (e) {
    e.preventDefault();
    self.zoom(e.deltaY < 0 ? 1.25 : 0.8, pt(e).x);
  }, { passive: false });
  c.addEventListener('mousedown', function (e) {
    var p = pt(e), ev = self.hit(p.x, p.y);
    var movable = ev && self.whatif && self.whatif.run === ev.rank.run && self.whatif.plan.inSet.has(ev);
    drag = { x: p.x, t0: self.t0, ev: movable ? ev : null, hit: ev, moved: false };
    e.preventDefault();
  });
  window.addEventListener('mousemove', function (e) {
    var p = pt(e);
    if (!drag) { self.hover(e.target === c ? self.hit(p.x, p.y) : null, e); return; }
    var dx = p.x - drag.x;
    if (Math.abs(dx) > 2) drag.moved = true;
    var per = (self.t1 - self.t0) / (c.clientWidth - GUTTER);
    if (drag.ev) { drag.dt = dx * per; self.hooks.dragging(drag.ev, drag.dt); } else if (drag.moved) {
      var len = self.t1 - self.t0;
      self.t0 = drag.t0 - dx * per;
      self.t1 = self.t0 + len;
      self.draw();
    }
  });
  window.addEventListener('mouseup', function () {
    if (!drag) return;
    var d = drag;
    drag = null;
    if (d.ev && d.moved) self.hooks.moved(d.ev, d.dt);
    else if (!d.moved) { self.selected = d.hit; self.hooks.select(d.hit); self.draw(); }
  });
};

DTS.View.prototype.hover = function (ev, e) {
  var tip = this.hooks.tip;
  if (!ev) { tip.style.display = 'none'; return; }
  tip.innerHTML = DTS.describe(ev, this.times(ev));
  tip.style.display = 'block';
  tip.style.left = e.pageX + 14 + 'px';
  tip.style.top = e.pageY + 10 + 'px';
};

function esc(s) {
  return String(s).replace(/[&<>"]/g, function (ch) { return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[ch]; });
}
DTS.esc = esc;

/* An event's details as HTML: a collective's kind, group, bytes, placements and the op whose
 * inputs needed it; any event's module, step, deps and consumers. */
DTS.describe = function (ev, tt) {
  var a = ev.args, rows = [['event', ev.name], ['rank', ev.rank.name],
    ['start', (tt[0] - DTS.stepOrigin(ev.rank.run, 0)).toFixed(1) + ' µs'], ['duration', (tt[1] - tt[0]).toFixed(1) + ' µs']];
  if (DTS.isColl(ev)) {
    rows.push(['kind', a.kind || ev.name], ['group', (a.group || a.group_label || '?') + (a.group_size ? ' (' + a.group_size + ' ranks)' : '')],
              ['bytes in / out', (a.bytes_in || 0) + ' / ' + (a.bytes_out || 0)]);
    if (a.from || a.to) rows.push(['placements', (a.from || '?') + ' -> ' + (a.to || '?')]);
    if (a.op) rows.push(['needed by op', a.op]);
    if (a.seq !== undefined) rows.push(['seq', a.seq]);
    rows.push(['consumers', ev.consumers.map(function (q) { return q.args.op || q.name; }).join(', ') || 'none recorded']);
  } else if (a.op) rows.push(['op', a.op]);
  if (a.module) rows.push(['module', a.module]);
  if (a.step !== undefined) rows.push(['step', a.step]);
  if (ev.producers.length) rows.push(['waited for', ev.producers.map(function (p) { return p.name; }).join(', ')]);
  if (a.detail) rows.push(['detail', a.detail]);
  return '<table>' + rows.map(function (r) { return '<tr><th>' + esc(r[0]) + '</th><td>' + esc(r[1]) + '</td></tr>'; }).join('') + '</table>';
};
