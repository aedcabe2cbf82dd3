// redstalk console, core: DOM helpers (text only: never innerHTML), the API client,
// formatting, the pager of every list, the hash router, live events, login and the
// overview page. pages.js adds the tube, job and search pages to `Pages`, clients.js the
// clients page, policies.js the policies page, schedules.js the schedules pages, retained.js a
// job's history, a deleted job's page and the retained jobs page.
"use strict";

const API = "/api/v1";
const Pages = {};
const live = { snapshot: null, source: null, listeners: [] };
let who = null;

// el("td", {class: "n"}, "text", child...): strings become text nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function $(id) { return document.getElementById(id); }

function showError(msg) {
  const box = $("error");
  box.textContent = msg;
  box.hidden = !msg;
}

function notify(msg) {
  const box = $("notice");
  box.textContent = msg;
  box.hidden = !msg;
  if (msg) setTimeout(() => { if (box.textContent === msg) box.hidden = true; }, 4000);
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(code ? code + ": " + message : message);
    this.status = status;
    this.code = code;
  }
}

// One API call; JSON in and out; the session cookie goes along (same origin only).
async function api(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(API + path, opts);
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { json = null; }
  if (!r.ok) {
    const e = json && json.error;
    throw new ApiError(r.status, e ? e.code : "", e ? e.message : r.status + " " + text.slice(0, 200));
  }
  return json;
}

// Run an action, showing its error (or `done`) to the operator.
async function act(what, fn, done) {
  showError("");
  try {
    const r = await fn();
    if (done) notify(done);
    return r;
  } catch (e) {
    showError(what + " failed: " + e.message);
    return undefined;
  }
}

// Formatting: numbers with separators, sizes and durations with units, ages.
const fmt = {
  num(n) { return n === undefined || n === null ? "–" : Number(n).toLocaleString("en-US"); },
  bytes(n) {
    if (n === undefined || n === null) return "–";
    const units = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  },
  secs(s) {
    if (s === undefined || s === null) return "–";
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  },
  // "3 s ago", with the exact time on hover.
  ago(secsAgo) {
    const when = new Date(Date.now() - secsAgo * 1000);
    const short = secsAgo < 60 ? secsAgo + " s" : secsAgo < 3600 ? Math.floor(secsAgo / 60) + " min"
      : secsAgo < 86400 ? Math.floor(secsAgo / 3600) + " h" : Math.floor(secsAgo / 86400) + " d";
    return el("time", { datetime: when.toISOString(), title: when.toLocaleString() }, short + " ago");
  },
};

function card(label, value, id) {
  return el("div", { class: "card" }, el("div", { class: "k" }, label),
    el("div", { class: "v", id: id }, value));
}

// A list paged by the API's cursors (every list: `cursor` in, `next_cursor` out).
// `load(cursor)` shows one page and returns its `next_cursor`; Previous and Next (and
// the `p` / `n` keys) walk back over the cursors seen and on to the next.
class Pager {
  constructor(prev, next, load) {
    Object.assign(this, { prev, next, load, cursors: [""], index: 0, nextCursor: null });
    prev.onclick = () => { if (this.index > 0) { this.index--; this.show(); } };
    next.onclick = () => {
      if (!this.nextCursor) return;
      this.cursors[++this.index] = this.nextCursor;
      this.show();
    };
    Pages.pager = { next: () => next.click(), prev: () => prev.click() };
  }
  get first() { return this.index === 0; }
  // The page at the current cursor, again.
  async reload() {
    this.nextCursor = await this.load(this.cursors[this.index]);
    this.prev.disabled = this.first;
    this.next.disabled = !this.nextCursor;
  }
  // Back to the first page.
  restart() { this.cursors = [""]; this.index = 0; return this.reload(); }
  show() { this.reload().catch((e) => showError(e.message)); }
}

// `&cursor=C` for a page after the first.
function cursorParam(c) { return c ? "&cursor=" + encodeURIComponent(c) : ""; }

function tubeLink(name) {
  return el("a", { href: "#/tube/" + encodeURIComponent(name), class: "tube" }, name);
}

// The hash router: #/, #/tube/NAME?state=S, #/job/ID, #/search, #/clients, #/policies,
// #/schedules, #/schedules/NAME, #/retained, #/login.
function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  live.listeners = [];
  showError("");
  const main = $("main");
  main.replaceChildren();
  const page = parts[0] || "overview";
  const show = Pages[page];
  if (!show) {
    main.append(el("h1", {}, "No such page"), el("a", { href: "#/" }, "Overview"));
    return;
  }
  document.querySelectorAll("header nav a").forEach((a) =>
    a.toggleAttribute("aria-current", a.id === "nav-" + page));
  show(main, parts.slice(1), params).catch((e) => showError(e.message));
}

// Live figures: one EventSource per browser, not per tab. A browser opens at most six
// HTTP/1.1 connections to one server and each stream holds one for its life, so with a
// stream per tab a seventh tab's pages would wait. One tab (the streamer) streams and
// relays each snapshot to the others over a BroadcastChannel; a tab that hears no
// streamer for a while (it closed, or never was) starts streaming, and of two streamers
// that hear each other the one with the smaller id stops.
const tab = { id: Math.random(), heard: 0, channel: null };
const QUIET_MS = 2500;

function setBadge(on, text) {
  const badge = $("live");
  badge.textContent = text;
  badge.className = on ? "badge on" : "badge warn";
}

function deliver(snap) {
  live.snapshot = snap;
  for (const f of live.listeners) f(snap);
}

function openStream() {
  const src = new EventSource(API + "/events");
  live.source = src;
  src.onopen = () => setBadge(true, "live");
  src.onerror = () => setBadge(false, "reconnecting");
  src.onmessage = (ev) => {
    let snap;
    try { snap = JSON.parse(ev.data); } catch (_) { return; }
    deliver(snap);
    if (tab.channel) tab.channel.postMessage({ from: tab.id, snap });
  };
}

function stopStream() {
  if (live.source) live.source.close();
  live.source = null;
}

function connectLive() {
  if (!("BroadcastChannel" in window)) { if (!live.source) openStream(); return; }
  if (tab.channel) return;
  tab.channel = new BroadcastChannel("redstalk-live");
  tab.channel.onmessage = (ev) => {
    const m = ev.data || {};
    if (m.reconnect) {
      if (live.source && live.source.readyState === EventSource.CLOSED) { stopStream(); openStream(); }
      return;
    }
    if (m.hello) {
      if (live.source) tab.channel.postMessage({ from: tab.id, snap: live.snapshot });
      return;
    }
    if (m.bye) { tab.heard = 0; return; }
    tab.heard = Date.now();
    if (live.source && m.from > tab.id) stopStream();
    if (!live.source) {
      setBadge(true, "live");
      if (m.snap) deliver(m.snap);
    }
    // Messages carrying `from` come from streamers only (snapshots and heartbeats).
  };
  const quiet = QUIET_MS * (0.6 + 0.8 * Math.random());
  setInterval(() => {
    if (live.source) { tab.channel.postMessage({ from: tab.id }); return; }
    if (Date.now() - tab.heard > quiet) openStream();
    else if (Date.now() - tab.heard > 1500) setBadge(false, "reconnecting");
  }, 500);
  window.addEventListener("pagehide", () => {
    if (live.source) tab.channel.postMessage({ from: tab.id, bye: true });
  });
  // A tab alone streams at once; others first listen for a streamer.
  tab.channel.postMessage({ from: tab.id, hello: true });
  setTimeout(() => { if (!live.source && !tab.heard) openStream(); }, 300);
}

// After a login: a stream refused before it (read auth) is not retried by the browser.
function reconnectLive() {
  if (live.source && live.source.readyState === EventSource.CLOSED) { stopStream(); openStream(); }
  else if (!live.source && tab.channel) tab.channel.postMessage({ reconnect: true });
  else connectLive();
}

function onSnapshot(f) {
  live.listeners.push(f);
  if (live.snapshot) f(live.snapshot);
}

async function refreshSession() {
  try {
    who = await api("GET", "/whoami");
    const s = await (await fetch("/console/session", { credentials: "same-origin" })).json();
    who.logged_in = s.logged_in;
    who.token_configured = s.token_configured;
  } catch (e) {
    // With --admin-read-auth even reads need the token: the login page says so.
    who = { logged_in: false, needs_login: e.status === 401 };
    if (!who.needs_login) showError("cannot reach the API: " + e.message);
  }
  const mode = $("mode");
  mode.textContent = who.read_only ? "read-only" : (who.mode || "");
  mode.className = who.read_only ? "badge warn" : "badge";
  $("nav-login").hidden = !!who.logged_in;
  $("logout").hidden = !who.logged_in;
}

Pages.login = async function (main) {
  const input = el("input", { type: "password", id: "token", autocomplete: "current-password", required: true });
  const form = el("form", { class: "login", id: "login-form" },
    el("label", { for: "token" }, "Admin token"), input,
    el("button", { type: "submit", id: "login-submit" }, "Log in"),
    el("p", { class: "muted" }, "The server checks the token and sets an HttpOnly cookie that " +
      "stands for it; the token itself is not stored in the browser."));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const r = await fetch("/console/login", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: input.value }),
    });
    input.value = "";
    if (!r.ok) {
      let msg = r.status + "";
      try { msg = (await r.json()).error.message; } catch (_) { /* keep the status */ }
      showError("login failed: " + msg);
      return;
    }
    await refreshSession();
    reconnectLive();
    location.hash = "#/";
  });
  main.append(el("h1", {}, "Log in"), form);
  input.focus();
};

const TUBES_PAGE = 50;

Pages.overview = async function (main) {
  const cards = el("div", { class: "cards", id: "server-cards" });
  const body = el("tbody", { id: "tubes-body" });
  const prev = el("button", { type: "button", id: "tubes-prev" }, "← Previous");
  const next = el("button", { type: "button", id: "tubes-next" }, "Next →");
  const count = el("span", { class: "muted", id: "tube-count" });
  main.append(el("h1", {}, "Overview"), cards, el("h2", {}, "Tubes"),
    el("table", { id: "tubes" }, el("thead", {}, el("tr", {},
      el("th", {}, "Tube"), ...["Ready", "Reserved", "Delayed", "Buried", "Total put"].map((h) =>
        el("th", { class: "n" }, h)), el("th", {}, "Paused"), el("th", {}, "Last hour"))), body),
    el("div", { class: "bar" }, prev, next, count));

  function row(t) {
    const paused = t.pause > 0
      ? el("span", { class: "badge warn" }, "paused, " + fmt.secs(t["pause-time-left"]) + " left") : "no";
    return el("tr", { "data-tube": t.name }, el("td", {}, tubeLink(t.name)),
      ...["current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed",
        "current-jobs-buried", "total-jobs"].map((k) => el("td", { class: "n", "data-k": k }, fmt.num(t[k]))),
      el("td", {}, paused), Hist.cell(t.name));
  }
  function render(tubes) { body.replaceChildren(...tubes.map(row)); }
  const pager = new Pager(prev, next, async (c) => {
    const r = await api("GET", "/tubes?limit=" + TUBES_PAGE + cursorParam(c));
    render(r.tubes);
    return r.next_cursor;
  });
  await Hist.refresh(true);
  await pager.reload();
  onSnapshot((snap) => {
    if (snap.error) { showError(snap.error); return; }
    Hist.refresh(); // at most once a minute; the rows redrawn next show it
    const s = snap.stats;
    cards.replaceChildren(
      card("Ready", fmt.num(s["current-jobs-ready"]), "stat-ready"),
      card("Reserved", fmt.num(s["current-jobs-reserved"])),
      card("Delayed", fmt.num(s["current-jobs-delayed"])),
      card("Buried", fmt.num(s["current-jobs-buried"])),
      card("Jobs put", fmt.num(s["total-jobs"])),
      card("Connections", fmt.num(s["current-connections"])),
      card("Tubes", fmt.num(snap.tube_count)),
      card("Uptime", fmt.secs(s.uptime)),
      card("Version", s.version));
    count.textContent = fmt.num(snap.tube_count) + " tubes";
    // The first page is the snapshot's first tubes; later pages update the rows shown.
    if (pager.first) {
      render(snap.tubes.slice(0, TUBES_PAGE));
      if (snap.tube_count > TUBES_PAGE && !pager.nextCursor) pager.reload().catch(() => {});
      next.disabled = snap.tube_count <= TUBES_PAGE || !pager.nextCursor;
    } else {
      for (const t of snap.tubes) {
        const tr = body.querySelector('tr[data-tube="' + CSS.escape(t.name) + '"]');
        if (tr) tr.replaceWith(row(t));
      }
    }
  });
};

document.addEventListener("keydown", (ev) => {
  const t = ev.target;
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  if (t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement) return;
  if (ev.key === "/") { ev.preventDefault(); location.hash = "#/search"; }
  else if (ev.key === "g") location.hash = "#/";
  else if (ev.key === "n" && Pages.pager) Pages.pager.next();
  else if (ev.key === "p" && Pages.pager) Pages.pager.prev();
});

window.addEventListener("hashchange", () => { Pages.pager = null; route(); });
window.addEventListener("DOMContentLoaded", async () => {
  $("logout").addEventListener("click", async () => {
    await fetch("/console/logout", { method: "POST", credentials: "same-origin" });
    await refreshSession();
    notify("logged out");
  });
  await refreshSession();
  if (who.needs_login) {
    notify("this server needs the admin token to show anything: log in");
    if (!location.hash.startsWith("#/login")) { location.hash = "#/login"; return; }
  } else {
    connectLive();
  }
  route();
});
