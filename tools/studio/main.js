/* The studio page's wiring: reads the embedded runs, builds the controls, the comparison table,
 * the what-if panel (moves, knobs, the figures and the assumptions) and the timeline view. */
'use strict';
var DTS = (window.DTS = window.DTS || {});
window.__dtErrors = [];
window.addEventListener('error', function (e) { window.__dtErrors.push(String(e.message)); });

function el(tag, attrs, html) {
  var e = document.createElement(tag);
  Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
  if (html !== undefined) e.innerHTML = html;
  return e;
}
function fmtUs(v) { return v === null ? '–' : v >= 1000 ? (v / 1000).toFixed(2) + ' ms' : v.toFixed(1) + ' µs'; }
function fmtBytes(v) { return v >= 1048576 ? (v / 1048576).toFixed(2) + ' MiB' : v >= 1024 ? (v / 1024).toFixed(1) + ' KiB' : v.toFixed(0) + ' B'; }

DTS.start = function () {
  var raw = JSON.parse(document.getElementById('dt-runs').textContent);
  var runs = raw.map(DTS.parseRun), body = document.body;
  DTS.runs = runs;
  body.appendChild(el('h1', {}, 'dtensor trace studio'));
  body.appendChild(el('p', { class: 'note' }, runs.length + ' run(s): ' + runs.map(function (r) {
    return '<b>' + DTS.esc(r.name) + '</b> (' + r.ranks.length + ' ranks, ' + r.stepIds.length + ' steps' +
      (r.hasDeps ? '' : ', no dependency records: stream order only') + ')';
  }).join(', ') + '. Hover a box for details, click to select it and see its dependency arrows.'));

  /* The comparison table (docs/tracing.md defines each column). */
  var heads = ['run', 'step time', 'compute', 'comm', 'overlap', 'exposed comm', 'pipeline bubble', 'collectives / step', 'bytes / step'];
  var table = el('table', { id: 'compare', class: 'grid' });
  table.appendChild(el('tr', {}, heads.map(function (h) { return '<th>' + h + '</th>'; }).join('')));
  runs.forEach(function (run) {
    var s = DTS.runSummary(run), tr = el('tr', { 'data-run': run.name });
    tr.appendChild(el('td', {}, DTS.esc(run.name)));
    DTS.FIELDS.forEach(function (f) {
      var v = s[f], txt = v === null ? '–' : f === 'bubble' ? (100 * v).toFixed(1) + ' %' :
        f === 'colls' ? v.toFixed(1) : f === 'bytes' ? fmtBytes(v) : fmtUs(v);
      tr.appendChild(el('td', { 'data-field': f, 'data-value': v === null ? '' : String(v) }, txt));
    });
    table.appendChild(tr);
  });
  body.appendChild(el('h2', {}, 'Compare (per step, mean over the steps after the first)'));
  body.appendChild(table);

  /* What-if panel. */
  var wi = el('div', { id: 'whatif' });
  wi.innerHTML = '<h2>What-if</h2><div class="bar">Run <select id="wi-run"><option value="">off</option></select>' +
    ' Network <select id="wi-net"></select>' +
    ' <label><input type="checkbox" id="wi-gpu"> project compute onto a GPU:</label>' +
    ' this machine <input id="wi-gflops" size="6"> GFLOP/s, GPU peak <input id="wi-peak" size="6" value="989"> TFLOP/s' +
    ' at <input id="wi-eff" size="3" value="40"> % <button id="wi-reset">reset moves</button></div>' +
    '<p>Recorded step time <b id="wi-rec">–</b>; rescheduled without moves <b id="wi-base">–</b>; ' +
    'with the moves and knobs <b id="wi-step">–</b>, comm/compute overlap <b id="wi-overlap">–</b>. ' +
    '<span id="wi-move"></span> <span id="wi-err" class="err"></span></p><p id="wi-assume" class="note"></p>';
  body.appendChild(wi);
  /* Controls. */
  var bar = el('div', { class: 'bar' });
  var stepSel = el('select', { id: 'step' }), ks = {};
  runs.forEach(function (r) { r.stepIds.forEach(function (k) { ks[k] = 1; }); });
  var kList = Object.keys(ks).map(Number).sort(function (a, b) { return a - b; });
  kList.forEach(function (k) { stepSel.appendChild(el('option', { value: k }, 'step ' + k)); });
  stepSel.value = kList.length > 1 ? kList[1] : kList[0];
  bar.appendChild(el('label', {}, 'Aligned at the start of '));
  bar.appendChild(stepSel);
  ['zoom-out:−', 'zoom-in:+', 'fit:fit'].forEach(function (b) {
    var p = b.split(':');
    bar.appendChild(el('button', { id: p[0] }, p[1]));
  });
  var arrows = el('input', { type: 'checkbox', id: 'arrows' });
  var al = el('label', {}, ' all dependency arrows');
  al.insertBefore(arrows, al.firstChild);
  bar.appendChild(al);
  body.appendChild(el('h2', {}, 'Timeline'));
  body.appendChild(bar);
  var info = el('div', { id: 'selected', class: 'note' }, 'Nothing selected.');
  body.appendChild(info);
  var scroll = el('input', { type: 'range', id: 'scroll', min: 0, max: 1000, value: 0 });
  body.appendChild(scroll);
  var canvas = el('canvas', { id: 'timeline' });
  body.appendChild(canvas);
  var tip = el('div', { id: 'tip' });
  body.appendChild(tip);

  var runSel = wi.querySelector('#wi-run'), netSel = wi.querySelector('#wi-net');
  runs.forEach(function (r, i) { runSel.appendChild(el('option', { value: i }, DTS.esc(r.name))); });
  Object.keys(DTS.NET_PRESETS).forEach(function (k) { netSel.appendChild(el('option', { value: k }, DTS.NET_PRESETS[k].label)); });

  var view, moves = [];
  function opts() {
    var run = runSel.value === '' ? null : runs[+runSel.value], scale = 1;
    var gfl = parseFloat(wi.querySelector('#wi-gflops').value), peak = parseFloat(wi.querySelector('#wi-peak').value);
    var eff = parseFloat(wi.querySelector('#wi-eff').value) / 100;
    if (wi.querySelector('#wi-gpu').checked && gfl > 0 && peak > 0 && eff > 0) scale = gfl / (peak * 1000 * eff);
    return { net: DTS.NET_PRESETS[netSel.value], computeScale: scale, run: run };
  }
  function assumptions(o) {
    var n = o.net.bw ? 'collectives take alpha x steps + fraction x bytes / bandwidth with alpha ' + o.net.alpha +
      ' µs and ' + o.net.bw + ' GB/s (ring: all-gather, reduce-scatter and all-to-all n-1 steps moving (n-1)/n of the bytes, ' +
      'all-reduce 2(n-1) steps and 2(n-1)/n; collectives without recorded bytes keep their recorded time)' :
      'collectives last the shortest recorded duration among their ranks (the rest was waiting)';
    return 'Assumptions: per rank two streams, the rank thread (compute and comm lanes, recorded order, recorded host ' +
      'gaps kept) and the comm thread; an event starts after its stream predecessor plus its gap, its recorded deps and ' +
      'its moved time; a collective starts on all ranks of its group (same communicator and seq) together; ' + n + '; compute ' +
      (o.computeScale === 1 ? 'as recorded' : 'scaled by ' + o.computeScale.toPrecision(3) + ' (this machine\'s GFLOP/s over the GPU\'s peak x efficiency)') +
      '; host gaps, ops and pipeline spans are not rescaled. Magenta outlines: the critical path.';
  }
  function recompute() {
    var o = opts();
    wi.querySelector('#wi-err').textContent = '';
    if (!o.run) { view.whatif = null; view.draw(); return; }
    var plan = DTS.buildPlan(o.run, view.k), sched = DTS.schedule(plan, o);
    if (!plan.ranks.length) {
      wi.querySelector('#wi-err').textContent = o.run.name + ' has no step ' + view.k + ': pick another step.';
      view.whatif = null;
      view.draw();
      return;
    }
    var base = DTS.schedule(DTS.buildPlan(o.run, view.k), { net: DTS.NET_PRESETS.recorded, computeScale: 1 });
    for (var i = 0; i < moves.length && !sched.error; i++) {
      DTS.moveEvent(plan, sched, moves[i].ev, moves[i].t);
      var next = DTS.schedule(plan, o);
      if (next.error) { wi.querySelector('#wi-err').textContent = next.error + ' (move undone)'; moves.length = i; return recompute(); }
      sched = next;
    }
    view.whatif = { run: o.run, plan: plan, sched: sched };
    var rec = DTS.stepMetrics(o.run, view.k);
    var set = function (id, v) { var e = wi.querySelector(id); e.textContent = fmtUs(v); e.setAttribute('data-value', String(v)); };
    set('#wi-rec', rec ? rec.time : 0);
    set('#wi-base', base.stepTime);
    set('#wi-step', sched.stepTime);
    set('#wi-overlap', sched.overlap);
    wi.querySelector('#wi-assume').textContent = assumptions(o);
    view.draw();
  }
  view = new DTS.View(canvas, runs, {
    tip: tip,
    select: function (ev) { info.innerHTML = ev ? DTS.describe(ev, view.times(ev)) : 'Nothing selected.'; },
    dragging: function (ev, dt) { view.ghost = { ev: ev, dt: dt }; view.draw(); },
    moved: function (ev, dt) {
      view.ghost = null;
      var t = view.times(ev)[0] + dt;
      moves.push({ ev: ev, t: t });
      var mv = wi.querySelector('#wi-move');
      mv.textContent = 'Moved ' + ev.name + ' (' + ev.rank.name + ') to not before ' + t.toFixed(3) + '.';
      mv.setAttribute('data-id', ev.id);
      mv.setAttribute('data-pid', ev.rank.pid);
      mv.setAttribute('data-t', String(t));
      recompute();
    },
    drawn: function (v) {
      var len = v.t1 - v.t0, room = Math.max(v.span - len, 1e-9);
      scroll.value = Math.round((1000 * v.t0) / room);
    },
  });
  DTS.view = view;
  function setStep() { moves = []; view.setStep(+stepSel.value); recompute(); }
  stepSel.onchange = setStep;
  netSel.onchange = recompute;
  runSel.onchange = function () { /* the run's measured rate, from its dt_run metadata */
    var run = runSel.value === '' ? null : runs[+runSel.value];
    if (run && run.gflops) wi.querySelector('#wi-gflops').value = run.gflops;
    moves = [];
    recompute();
  };
  ['#wi-gpu', '#wi-gflops', '#wi-peak', '#wi-eff'].forEach(function (id) { wi.querySelector(id).onchange = recompute; });
  wi.querySelector('#wi-reset').onclick = function () { moves = []; recompute(); };
  document.getElementById('zoom-in').onclick = function () { view.zoom(2); };
  document.getElementById('zoom-out').onclick = function () { view.zoom(0.5); };
  document.getElementById('fit').onclick = function () { view.fit(); };
  arrows.onchange = function () { view.allArrows = arrows.checked; view.draw(); };
  scroll.oninput = function () {
    var len = view.t1 - view.t0;
    view.t0 = (Math.max(view.span - len, 0) * scroll.value) / 1000;
    view.t1 = view.t0 + len;
    view.draw();
  };
  window.addEventListener('resize', function () { view.draw(); });
  setStep();
  document.body.setAttribute('data-ready', '1');
};

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', DTS.start);
else DTS.start();
