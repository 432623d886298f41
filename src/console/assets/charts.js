// Hand-written SVG charts (no library): a stacked bar chart over time buckets and a sparkline.
// Colours are SVG presentation attributes (the CSP allows no inline styles).
import { h } from './lib.js';

export const PALETTE = ['#2563eb', '#d97706', '#059669', '#dc2626', '#7c3aed', '#0891b2', '#db2777', '#65a30d', '#9333ea', '#ea580c'];

const S = (tag, attrs, ...c) => h(tag, { ...attrs, svg: true }, ...c);

// The axis top: four equal steps of 1, 2 or 5 times a power of ten, at or above v.
function niceMax(v) {
  if (v <= 0) return 4;
  const raw = v / 4;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return 4 * m * p;
  return 40 * p;
}

// buckets: sorted x values (ms); series: [{name, values: Map(bucket -> y)}]. Stacked bars per
// bucket, a y axis with 4 ticks, x labels thinned to fit, a legend; <title> tooltips per bar.
export function stackedBars(buckets, series, { width = 960, height = 260, label = 'chart', xfmt = String, yfmt = String } = {}) {
  const pad = { l: 56, r: 12, t: 10, b: 28 };
  const w = width - pad.l - pad.r;
  const ht = height - pad.t - pad.b;
  const totals = buckets.map((b) => series.reduce((s, se) => s + (se.values.get(b) || 0), 0));
  const max = niceMax(Math.max(0, ...totals));
  const svg = S('svg', { viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'img', 'aria-label': label });
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + ht - (ht * i) / 4;
    svg.append(S('line', { x1: pad.l, x2: pad.l + w, y1: y, y2: y, stroke: '#e5e7eb' }));
    svg.append(S('text', { x: pad.l - 6, y: y + 4, 'text-anchor': 'end', class: 'tick' }, yfmt((max * i) / 4)));
  }
  const n = Math.max(1, buckets.length);
  const bw = w / n;
  const every = Math.max(1, Math.ceil(n / Math.floor(w / 90)));
  buckets.forEach((b, i) => {
    let y = pad.t + ht;
    series.forEach((se, k) => {
      const v = se.values.get(b) || 0;
      if (!v) return;
      const bh = (v / max) * ht;
      y -= bh;
      svg.append(
        S('rect', { x: pad.l + i * bw + bw * 0.1, y, width: Math.max(1, bw * 0.8), height: bh, fill: PALETTE[k % PALETTE.length], 'data-series': se.name, 'data-bucket': b, 'data-value': v },
          S('title', {}, `${se.name} · ${xfmt(b)}: ${yfmt(v)}`)),
      );
    });
    if (i % every === 0) {
      svg.append(S('text', { x: pad.l + i * bw + bw / 2, y: height - 8, 'text-anchor': 'middle', class: 'tick' }, xfmt(b)));
    }
  });
  const legend = h('ul', { class: 'legend' }, series.map((se, k) => h('li', {}, S('svg', { width: 10, height: 10, 'aria-hidden': 'true' }, S('rect', { width: 10, height: 10, fill: PALETTE[k % PALETTE.length] })), ` ${se.name}`)));
  return h('figure', { class: 'chart-wrap' }, svg, legend);
}

// A small line of recent values (e.g. requests/s over the last refreshes).
export function sparkline(values, { width = 120, height = 28, stroke = '#2563eb' } = {}) {
  const max = Math.max(1e-9, ...values);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const pts = values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`).join(' ');
  return S('svg', { viewBox: `0 0 ${width} ${height}`, width, height, class: 'spark', 'aria-hidden': 'true' }, S('polyline', { points: pts, fill: 'none', stroke, 'stroke-width': 1.5 }));
}

// Lines over a numeric x axis, each with an optional band (e.g. min-max over seeds):
// series: [{name, points: [[x, y]], band: [[x, lo, hi]], colour?}]. A y axis with 4 ticks from yMin, x
// ticks every `xStep`, a legend; each point carries a <title> tooltip and data-x/data-y.
export function lineChart(series, { width = 960, height = 280, label = 'chart', xfmt = String, yfmt = String, xStep, yMin = 0 } = {}) {
  const pad = { l: 56, r: 28, t: 10, b: 28 };
  const w = width - pad.l - pad.r;
  const ht = height - pad.t - pad.b;
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = series.flatMap((s) => [...s.points.map((p) => p[1]), ...(s.band || []).map((b) => b[2])]);
  const x0 = Math.min(...xs, Infinity), x1 = Math.max(...xs, -Infinity);
  const span = Number.isFinite(x0) && x1 > x0 ? x1 - x0 : 1;
  const lo = Number.isFinite(x0) ? x0 : 0;
  // The y axis: from yMin (or, with yMin 'auto', a round value at or below the data and 0) in 4
  // equal round steps up to the data's top.
  let bottom = yMin === 'auto' ? Math.min(0, ...ys) : yMin;
  const high = Math.max(bottom + 1, ...ys);
  let range = niceMax(high - bottom);
  if (yMin === 'auto') {
    // Each round moves to the next round range (at least 1% wider): 64 rounds span 10^28.
    for (let i = 0; i < 64; i++) {
      const s = range / 4;
      const b = Math.floor(bottom / s) * s;
      if (b + range >= high || i === 63) { bottom = b; break; }
      range = niceMax(range * 1.01);
    }
  }
  yMin = bottom;
  const top = yMin + range;
  const X = (x) => pad.l + ((x - lo) / span) * w;
  const Y = (y) => pad.t + ht - ((y - yMin) / (top - yMin)) * ht;
  const svg = S('svg', { viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'img', 'aria-label': label });
  for (let i = 0; i <= 4; i++) {
    const v = yMin + ((top - yMin) * i) / 4;
    svg.append(S('line', { x1: pad.l, x2: pad.l + w, y1: Y(v), y2: Y(v), stroke: '#e5e7eb' }));
    svg.append(S('text', { x: pad.l - 6, y: Y(v) + 4, 'text-anchor': 'end', class: 'tick' }, yfmt(v)));
  }
  const step = xStep && span / xStep <= 40 ? xStep : span / 4;
  for (let i = 0; i <= 40 && lo + i * step <= lo + span + 1e-9; i++) {
    const x = lo + i * step;
    svg.append(S('text', { x: X(x), y: height - 8, 'text-anchor': 'middle', class: 'tick' }, xfmt(x)));
  }
  series.forEach((s, k) => {
    const colour = s.colour || PALETTE[k % PALETTE.length];
    if (s.band && s.band.length > 1) {
      const upper = s.band.map((b) => `${X(b[0]).toFixed(1)},${Y(b[2]).toFixed(1)}`);
      const lower = s.band.slice().reverse().map((b) => `${X(b[0]).toFixed(1)},${Y(b[1]).toFixed(1)}`);
      svg.append(S('polygon', { points: [...upper, ...lower].join(' '), fill: colour, 'fill-opacity': 0.15, stroke: 'none', 'data-band': s.name }));
    }
    svg.append(S('polyline', { points: s.points.map((p) => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(' '), fill: 'none', stroke: colour, 'stroke-width': 1.8, 'data-series': s.name }));
    for (const [x, y] of s.points) {
      svg.append(S('circle', { cx: X(x), cy: Y(y), r: 2.5, fill: colour, 'data-series': s.name, 'data-x': x, 'data-y': y }, S('title', {}, `${s.name} · ${xfmt(x)}: ${yfmt(y)}`)));
    }
  });
  const legend = h('ul', { class: 'legend' }, series.map((s, k) => h('li', {}, S('svg', { width: 10, height: 10, 'aria-hidden': 'true' }, S('rect', { width: 10, height: 10, fill: s.colour || PALETTE[k % PALETTE.length] })), ` ${s.name}`)));
  return h('figure', { class: 'chart-wrap' }, svg, legend);
}
