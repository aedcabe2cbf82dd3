// redstalk console, history: the overview's sparklines (puts, reserves, deletes per
// minute and the mean wait, last hour) and the tube page's 24-hour chart, drawn as
// inline SVG with DOM calls (no markup strings, no style attributes: colours are CSS
// classes in app.css). Data: GET /api/v1/history, fetched when a page needs it and
// then at most once a minute, whatever the live snapshot does every second.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const SERIES = ["puts", "reserves", "deletes"];

const Hist = {
  hour: new Map(), // tube -> dense arrays of the last 60 minutes
  loadedAt: 0,
  loading: null,
  timer: null,
};

function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

// The API's sparse points as dense arrays of `minutes` values, oldest first.
function densePoints(r, points, minutes) {
  const d = { puts: [], reserves: [], deletes: [], wait_ms: [] };
  for (const k of Object.keys(d)) d[k] = new Array(minutes).fill(0);
  const from = r.now - minutes + 1;
  for (const p of points) {
    const i = p.minute - from;
    if (i < 0 || i >= minutes) continue;
    for (const k of Object.keys(d)) d[k][i] = p[k];
  }
  return d;
}

// Fetch the last hour of every kept tube (at most once a minute).
Hist.refresh = function (force) {
  if (!force && Date.now() - Hist.loadedAt < 60000) return Hist.loading || Promise.resolve();
  Hist.loadedAt = Date.now();
  Hist.loading = api("GET", "/history?minutes=60").then((r) => {
    Hist.hour = new Map(r.tubes.map((t) => [t.name, densePoints(r, t.points, 60)]));
    Hist.omitted = r.tubes_omitted;
  }).catch(() => { /* the sparklines stay empty; the live figures do not depend on them */ });
  if (!Hist.timer) Hist.timer = setInterval(() => Hist.refresh(), 60000);
  return Hist.loading;
};

function sum(a) { return a.reduce((x, y) => x + y, 0); }

// A polyline of `values` scaled to `max` in a w x h box.
function line(values, max, w, h, cls) {
  const step = values.length > 1 ? w / (values.length - 1) : w;
  const pts = values.map((v, i) => (i * step).toFixed(1) + "," + (h - 1 - (max ? v / max : 0) * (h - 2)).toFixed(1));
  return svgEl("polyline", { points: pts.join(" "), class: "line " + cls });
}

function chart(d, w, h, what, label) {
  const svg = svgEl("svg", { viewBox: "0 0 " + w + " " + h, width: w, height: h, role: "img",
    class: "spark " + what, "aria-label": label });
  const title = svgEl("title");
  title.textContent = label;
  svg.append(title);
  if (what === "wait") {
    svg.append(line(d.wait_ms, Math.max(...d.wait_ms), w, h, "wait"));
  } else {
    const max = Math.max(...SERIES.map((k) => Math.max(...d[k])));
    for (const k of SERIES) svg.append(line(d[k], max, w, h, k));
  }
  return svg;
}

function countsLabel(d, span) {
  return span + ": " + SERIES.map((k) => fmt.num(sum(d[k])) + " " + k).join(", ") +
    "; busiest minute " + fmt.num(Math.max(...d.puts)) + " puts";
}

function waitLabel(d, span) {
  const busy = d.wait_ms.filter((v, i) => d.reserves[i] > 0);
  const mean = busy.length ? Math.round(sum(busy) / busy.length) : 0;
  return span + ": reserved jobs had waited as ready " + fmt.num(mean) + " ms on average " +
    "(the mean of the minutes with reserves), " + fmt.num(Math.max(0, ...busy)) + " ms in the slowest minute";
}

// The overview's cell for one tube: counts and wait sparklines of the last hour.
Hist.cell = function (name) {
  const d = Hist.hour.get(name) || densePoints({ now: 0 }, [], 60);
  return el("td", { class: "sparks" },
    chart(d, 90, 20, "counts", countsLabel(d, "last hour of " + name)),
    chart(d, 60, 20, "wait", waitLabel(d, "last hour of " + name)));
};

// The tube page's chart of the last 24 hours.
Hist.day = function (name) {
  const box = el("div", { id: "tube-history", class: "history" }, el("p", { class: "muted" }, "loading…"));
  api("GET", "/history?minutes=1440&tube=" + encodeURIComponent(name)).then((r) => {
    const t = r.tubes[0];
    const d = densePoints(r, t ? t.points : [], 1440);
    box.replaceChildren(
      chart(d, 720, 80, "counts", countsLabel(d, "last 24 hours")),
      el("p", { class: "muted" }, countsLabel(d, "last 24 hours"), " (",
        el("span", { class: "key puts" }, "puts"), " ", el("span", { class: "key reserves" }, "reserves"), " ",
        el("span", { class: "key deletes" }, "deletes"), ")"),
      chart(d, 720, 40, "wait", waitLabel(d, "last 24 hours")),
      el("p", { class: "muted" }, waitLabel(d, "last 24 hours")));
  }).catch((e) => box.replaceChildren(el("p", { class: "muted" }, "no history: " + e.message)));
  return box;
};
