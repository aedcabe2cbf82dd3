// redstalk console, pages: a tube (its jobs by state, paged by the API's cursors (the
// `Pager` of app.js), selected and acted on; pause; put; find by key and act by key; the
// policy that governs it, from policies.js), a job (figures with its key and dead letter
// reason, actions by id and by key, body as text / JSON / hex, download) and the body
// search. A deleted job's page and a job's history are retained.js'. Every value
// reaches the page as text (see app.js `el`).
"use strict";

const STATES = ["ready", "delayed", "reserved", "buried"];

function button(id, label, onclick, cls) {
  return el("button", { type: "button", id: id, class: cls, onclick: onclick }, label);
}

// Every delete asks first; `what` names what goes.
function confirmDelete(what) { return confirm("Delete " + what + "? This cannot be undone."); }

// The buttons that act on jobs: `ids()` says which, `after()` runs once all are done.
function jobActions(ids, after) {
  const moveTo = el("input", { id: "move-tube", placeholder: "tube", "aria-label": "move to tube", size: 14 });
  const pri = el("input", { id: "pri-value", type: "number", min: 0, max: 4294967295, placeholder: "priority", "aria-label": "priority" });
  const delay = el("input", { id: "delay-value", type: "number", min: 0, placeholder: "delay s", "aria-label": "delay in seconds" });
  async function run(what, one) {
    const list = ids();
    if (!list.length) { showError("select jobs first"); return; }
    let done = 0;
    const ok = await act(what, async () => {
      for (const id of list) { await one(id); done++; }
    });
    if (ok !== undefined || done) notify(what + ": " + done + " of " + list.length + " job(s)");
    after();
  }
  return el("div", { class: "bar", id: "job-actions" },
    button("act-delete", "Delete", () => {
      const n = ids().length;
      if (n && confirmDelete(n + " job(s)")) run("delete", (id) => api("DELETE", "/jobs/" + id));
    }, "danger"),
    button("act-kick", "Kick", () => run("kick", (id) => api("POST", "/jobs/" + id + "/kick"))),
    button("act-bury", "Bury", () => run("bury", (id) => api("POST", "/jobs/" + id + "/bury"))),
    moveTo, button("act-move", "Move", () => run("move", (id) => api("POST", "/jobs/" + id + "/move", { tube: moveTo.value }))),
    pri, button("act-pri", "Set priority", () => run("priority", (id) => api("POST", "/jobs/" + id + "/pri", { pri: Number(pri.value) }))),
    delay, button("act-delay", "Set delay", () => run("delay", (id) => api("POST", "/jobs/" + id + "/delay", { delay: Number(delay.value) }))));
}

function tubeFigures(t) {
  return [card("Ready", fmt.num(t["current-jobs-ready"]), "tube-ready"),
    card("Reserved", fmt.num(t["current-jobs-reserved"])),
    card("Delayed", fmt.num(t["current-jobs-delayed"])),
    card("Buried", fmt.num(t["current-jobs-buried"])),
    card("Jobs put", fmt.num(t["total-jobs"])),
    card("Waiting", fmt.num(t["current-waiting"])),
    card("Paused", t.pause > 0 ? fmt.secs(t["pause-time-left"]) + " left" : "no", "tube-paused")];
}

function tubeControls(name, reload) {
  const secs = el("input", { id: "pause-secs", type: "number", min: 1, value: 60, "aria-label": "pause seconds" });
  const bound = el("input", { id: "kick-bound", type: "number", min: 1, value: 100, "aria-label": "kick at most" });
  const path = "/tubes/" + encodeURIComponent(name);
  return el("div", { class: "bar" },
    secs, el("button", { type: "button", id: "tube-pause", onclick: () =>
      act("pause", () => api("POST", path + "/pause", { delay: Number(secs.value) }), "paused").then(reload) }, "Pause"),
    el("button", { type: "button", id: "tube-resume", onclick: () =>
      act("resume", () => api("POST", path + "/pause", { delay: 0 }), "resumed").then(reload) }, "Resume"),
    bound, el("button", { type: "button", id: "tube-kick", onclick: () =>
      act("kick", () => api("POST", path + "/kick", { bound: Number(bound.value) }), "kicked").then(reload) }, "Kick tube"));
}

function putForm(name, reload) {
  const body = el("textarea", { id: "put-body", "aria-label": "job body" });
  const num = (id, label, value) => el("label", {}, label + " ", el("input", { id: id, type: "number", min: 0, value: value }));
  const form = el("form", { id: "put-form" }, el("legend", {}, "Put a job"), body,
    el("div", { class: "bar" }, num("put-pri", "priority", 1024), num("put-delay", "delay s", 0),
      num("put-ttr", "TTR s", 60), el("button", { type: "submit", id: "put-submit" }, "Put")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const r = await act("put", () => api("POST", "/tubes/" + encodeURIComponent(name) + "/jobs", {
      body: body.value, pri: Number($("put-pri").value), delay: Number($("put-delay").value),
      ttr: Number($("put-ttr").value),
    }));
    if (r) { notify("put job " + r.id); body.value = ""; reload(); }
  });
  return el("fieldset", {}, form);
}

// A job a dead letter rule buried: a badge whose title gives the reason (none else).
function deadBadge(j) {
  if (!j.dead_letter) return null;
  return el("span", { class: "badge warn dead", title: "dead letter: " + j.dead_letter.reason }, "dead letter");
}

function jobRow(j, selected, onToggle) {
  const box = el("input", { type: "checkbox", class: "sel", "aria-label": "select job " + j.id });
  box.checked = selected.has(j.id);
  box.addEventListener("change", () => onToggle(j.id, box.checked));
  const timing = j.state === "delayed" || j.state === "reserved" ? fmt.secs(j["time-left"]) + " left" : "";
  const tr = el("tr", { "data-id": j.id, class: box.checked ? "selected" : null },
    el("td", {}, box), el("td", { class: "n" }, deadBadge(j), el("a", { href: "#/job/" + j.id }, String(j.id))),
    el("td", { class: "n" }, fmt.num(j.pri)), el("td", {}, fmt.ago(j.age)), el("td", {}, timing),
    el("td", { class: "n" }, fmt.num(j.reserves)), el("td", { class: "n" }, fmt.num(j.releases)),
    el("td", { class: "n" }, fmt.num(j.buries)), el("td", { class: "n" }, fmt.num(j.kicks)),
    el("td", { class: "n" }, fmt.bytes(j.body_size)), el("td", { class: "key" }, j.key || ""));
  return tr;
}

// `/tubes/TUBE/keys/KEY`, the API's routes by key.
function keyPath(tube, key) {
  return "/tubes/" + encodeURIComponent(tube) + "/keys/" + encodeURIComponent(key);
}

// The buttons that act on a keyed job by its key (docs/API.md, *Changes*): kick, delay
// (the seconds asked for), bury, delete (after a confirmation). `after()` runs once a
// change is done; a refusal (409 in a state that does not take it, 404 ...) stays on
// screen as the API's message.
function keyActions(tube, key, after) {
  const path = keyPath(tube, key);
  const run = (what, method, sub, body) =>
    act(what + " by key", () => api(method, path + sub, body), what + ": key " + key)
      .then((r) => { if (r !== undefined) after(); });
  return [
    button("key-kick", "Kick", () => run("kick", "POST", "/kick")),
    button("key-delay", "Delay", () => {
      const secs = prompt("Delay the job of key " + key + " by how many seconds? (0 makes it ready)", "60");
      if (secs === null) return;
      if (!/^\s*\d+\s*$/.test(secs)) { showError("delay by key: a whole number of seconds, not " + secs); return; }
      run("delay", "POST", "/delay", { delay: Number(secs) });
    }),
    button("key-bury", "Bury", () => run("bury", "POST", "/bury")),
    button("key-delete", "Delete", () => {
      if (confirmDelete("the job of key " + key)) run("delete", "DELETE", "");
    }, "danger"),
  ];
}

// Find the tube's job by its key (the API's find by key, no scan) and act on it by key:
// its id (a link to its page) and state, or that it was deleted inside its dedupe
// window, or that the key is unknown. `changed()` runs after a change (the list).
function keyFinder(name, changed) {
  const key = el("input", { id: "find-key", placeholder: "key", "aria-label": "job key", size: 20 });
  const result = el("div", { id: "key-result", class: "bar", "aria-live": "polite" });
  async function find(k) {
    const r = await act("find by key", () => api("GET", keyPath(name, k)).catch((e) => {
      if (e.status === 404) return null;
      throw e;
    }));
    if (r === undefined) { result.replaceChildren(); return; }
    const what = el("span", { id: "key-state", "data-state": r ? r.state : "unknown" }, "key ",
      el("code", {}, k), ": ");
    if (r === null) what.append("not found");
    else if (r.state === "deleted" && r.deleted_at) {
      // Retained (--retain): its record's page, with its history.
      what.append("job ", el("a", { href: "#/job/" + r.id, id: "key-job" }, String(r.id)),
        ", deleted " + r.deleted_at + " (retained)");
    } else if (r.state === "deleted") what.append("job " + r.id + " deleted, window open");
    else what.append("job ", el("a", { href: "#/job/" + r.id, id: "key-job" }, String(r.id)), ", " + r.state);
    const live = r && r.state !== "deleted";
    result.replaceChildren(what, ...(live ? keyActions(name, k, () => { find(k); changed(); }) : []));
  }
  const form = el("form", { id: "find-key-form", class: "bar" }, key,
    el("button", { type: "submit", id: "find-key-submit" }, "Find by key"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    find(key.value);
  });
  return el("div", { id: "key-box" }, form, result);
}

Pages.tube = async function (main, parts, params) {
  const name = parts[0] || "";
  const state = STATES.includes(params.get("state")) ? params.get("state") : "ready";
  const figures = el("div", { class: "cards", id: "tube-cards" });
  const body = el("tbody", { id: "jobs-body" });
  const selected = new Set();
  const limit = el("select", { id: "page-size", "aria-label": "jobs per page" },
    ...[50, 100, 500, 1000].map((n) => el("option", { value: n }, n + " per page")));
  const prev = el("button", { type: "button", id: "jobs-prev" }, "← Previous");
  const next = el("button", { type: "button", id: "jobs-next" }, "Next →");
  const where = el("span", { class: "muted", id: "jobs-where" });
  const all = el("input", { type: "checkbox", id: "select-all", "aria-label": "select all on this page" });
  const tabs = el("nav", { class: "bar tabs", "aria-label": "job states" }, ...STATES.map((s) =>
    el("a", { href: "#/tube/" + encodeURIComponent(name) + "?state=" + s, id: "tab-" + s,
      "aria-current": s === state ? "page" : null }, s)));
  const pager = new Pager(prev, next, async (c) => {
    const r = await api("GET", "/tubes/" + encodeURIComponent(name) + "/jobs?state=" + state +
      "&limit=" + limit.value + cursorParam(c));
    selected.clear();
    all.checked = false;
    body.replaceChildren(...r.jobs.map((j) => jobRow(j, selected, toggle)));
    if (!r.jobs.length) body.append(el("tr", {}, el("td", { colspan: 11, class: "muted" }, "no " + state + " jobs")));
    where.textContent = "page " + (pager.index + 1) + " (" + r.jobs.length + " jobs)";
    return r.next_cursor;
  });
  const reload = () => Promise.all([pager.reload(), loadTube()]).catch((e) => showError(e.message));
  async function loadTube() {
    const t = await api("GET", "/tubes/" + encodeURIComponent(name));
    figures.replaceChildren(...tubeFigures(t));
  }
  function toggle(id, on) {
    if (on) selected.add(id); else selected.delete(id);
    const tr = body.querySelector('tr[data-id="' + id + '"]');
    if (tr) tr.classList.toggle("selected", on);
  }
  all.addEventListener("change", () => body.querySelectorAll("tr[data-id]").forEach((tr) => {
    const box = tr.querySelector("input.sel");
    box.checked = all.checked;
    toggle(Number(tr.dataset.id), all.checked);
  }));
  limit.onchange = () => pager.restart().catch((e) => showError(e.message));
  main.append(el("h1", {}, "Tube ", el("span", { id: "tube-name" }, name)), figures, tubePolicyLine(name),
    tubeControls(name, reload),
    keyFinder(name, reload), tabs, jobActions(() => [...selected], reload),
    el("table", { id: "jobs" }, el("thead", {}, el("tr", {}, el("th", {}, all),
      ...["Id", "Priority", "Put", "Time left", "Reserves", "Releases", "Buries", "Kicks", "Size", "Key"].map((h, i) =>
        el("th", { class: i === 2 || i === 3 || i === 9 ? null : "n" }, h)))), body),
    el("div", { class: "bar" }, prev, next, limit, where), putForm(name, reload),
    el("h2", {}, "Last 24 hours"), Hist.day(name));
  await reload();
  let last = "";
  onSnapshot((snap) => {
    const t = (snap.tubes || []).find((x) => x.name === name);
    if (!t) return;
    figures.replaceChildren(...tubeFigures(t));
    // New jobs show up by themselves on the first page while nothing is selected.
    const key = STATES.map((s) => t["current-jobs-" + s]).join(",") + "," + t["total-jobs"];
    if (last && key !== last && pager.first && !selected.size) pager.reload().catch(() => {});
    last = key;
  });
};

// The first bytes of a body as a hex dump (offset, 16 bytes, their ASCII).
function hexDump(bytes, max) {
  const lines = [];
  for (let off = 0; off < Math.min(bytes.length, max); off += 16) {
    const row = bytes.subarray(off, Math.min(off + 16, bytes.length));
    const hex = Array.from(row, (b) => b.toString(16).padStart(2, "0")).join(" ");
    const ascii = Array.from(row, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(off.toString(16).padStart(8, "0") + "  " + hex.padEnd(48) + "  " + ascii);
  }
  return lines.join("\n");
}

const SHOWN_TEXT = 256 * 1024;
// Bodies up to this size are fetched whole; of larger ones the page shows a preview.
const FETCHED_WHOLE = 4 * 1024 * 1024;

// A job's body (or its first 64 KiB when it is large) as bytes.
async function bodyBytes(id, size) {
  if (size <= FETCHED_WHOLE) {
    const r = await fetch(API + "/jobs/" + id + "/body", { credentials: "same-origin" });
    if (!r.ok) throw new ApiError(r.status, "", "body: " + r.status);
    return new Uint8Array(await r.arrayBuffer());
  }
  const p = await api("GET", "/jobs/" + id + "?body=preview&preview=65536");
  if (p.body !== undefined) return new TextEncoder().encode(p.body);
  return Uint8Array.from(atob(p.body_base64), (c) => c.charCodeAt(0));
}

Pages.job = async function (main, parts) {
  const id = Number(parts[0]);
  const j = await api("GET", "/jobs/" + id + "?body=none");
  // Gone, but the server retains its record (retained.js).
  if (j.state === "deleted") { await deletedJobPage(main, j); return; }
  const raw = await bodyBytes(id, j.body_size);
  let valid = true;
  try { new TextDecoder("utf-8", { fatal: true }).decode(raw); } catch (_) { valid = false; }
  const text = new TextDecoder("utf-8").decode(raw.subarray(0, SHOWN_TEXT));
  const pre = el("pre", { class: "body", id: "job-body", tabindex: 0 });
  const note = el("p", { class: "muted", id: "body-note" });
  function view(kind) {
    let shown = text;
    const shownOf = Math.min(raw.length, SHOWN_TEXT);
    let msg = j.body_size > shownOf ? "first " + fmt.bytes(shownOf) + " of " + fmt.bytes(j.body_size) : "";
    if (kind === "json") {
      try { shown = JSON.stringify(JSON.parse(new TextDecoder().decode(raw)), null, 2); msg = ""; } catch (e) { msg = "not JSON: " + e.message; }
    } else if (kind === "hex") {
      shown = hexDump(raw, 64 * 1024);
      msg = j.body_size > 64 * 1024 ? "first 64 KiB of " + fmt.bytes(j.body_size) : "";
    }
    if (!valid && kind !== "json") {
      msg = (msg ? msg + "; " : "") + "not valid UTF-8" + (kind === "text" ? " (shown with replacement characters)" : "");
    }
    pre.textContent = shown;
    note.textContent = msg;
    document.querySelectorAll("#body-views button").forEach((b) => b.setAttribute("aria-pressed", b.dataset.kind === kind));
  }
  const views = el("div", { class: "bar", id: "body-views" }, ...["text", "json", "hex"].map((k) =>
    el("button", { type: "button", "data-kind": k, id: "view-" + k, onclick: () => view(k) }, k === "json" ? "Pretty JSON" : k === "hex" ? "Hex" : "Text")),
  el("a", { href: API + "/jobs/" + id + "/body", download: "job-" + id + ".bin", id: "download" }, "Download (" + fmt.bytes(j.body_size) + ")"));
  // After a change: a refusal stays on screen; a deleted job sends back to its tube.
  function changed() {
    if (!$("error").hidden) return;
    api("GET", "/jobs/" + id + "?body=none").then(() => route(),
      () => { location.hash = "#/tube/" + encodeURIComponent(j.tube); });
  }
  const rows = [["Id", j.id], ["Tube", tubeLink(j.tube)], ["Key", j.key || "–"], ["State", j.state],
    ...(j.dead_letter ? [["Dead letter", j.dead_letter.reason]] : []), ["Priority", fmt.num(j.pri)],
    ["Put", fmt.ago(j.age)], ["Delay", fmt.secs(j.delay)], ["TTR", fmt.secs(j.ttr)],
    ["Time left", j.state === "delayed" || j.state === "reserved" ? fmt.secs(j["time-left"]) : "–"],
    ["Reserves", fmt.num(j.reserves)], ["Timeouts", fmt.num(j.timeouts)], ["Releases", fmt.num(j.releases)],
    ["Buries", fmt.num(j.buries)], ["Kicks", fmt.num(j.kicks)], ["Body", fmt.bytes(j.body_size)],
    ["Held by", j.holder ? (j.holder.addr || "?") + " (connection " + j.holder.conn + ", instance " + j.holder.instance + ")" : "–"]];
  main.append(el("h1", {}, "Job " + j.id),
    el("table", { id: "job-figures" }, el("tbody", {}, ...rows.map(([k, v]) =>
      el("tr", {}, el("th", {}, k), el("td", { "data-k": k }, v))))),
    jobActions(() => [id], changed),
    ...(j.key ? [el("div", { class: "bar", id: "key-actions" }, el("span", { class: "muted" }, "By key ",
      el("code", {}, j.key), ":"), ...keyActions(j.tube, j.key, changed))] : []),
    ...(j.history ? [el("h2", {}, "History"), historyTimeline(j)] : []),
    el("h2", {}, "Body"), views, note, pre);
  view(valid ? "text" : "hex");
};

Pages.search = async function (main, parts, params) {
  const q = el("input", { id: "search-q", type: "search", placeholder: "text in the body", required: true, value: params.get("q") || "" });
  const tube = el("input", { id: "search-tube", placeholder: "any tube", "aria-label": "tube" });
  const state = el("select", { id: "search-state", "aria-label": "state" }, el("option", { value: "" }, "any state"),
    ...STATES.map((s) => el("option", { value: s }, s)));
  const body = el("tbody", { id: "search-body" });
  const more = el("button", { type: "button", id: "search-more", hidden: true }, "Continue");
  const status = el("span", { class: "muted", id: "search-status" });
  let cursor = null;
  let scanned = 0;
  // One click looks through at most 10 steps of the server's bounded scan, stopping at
  // the first step that finds something.
  async function step() {
    for (let i = 0; i < 10; i++) {
      const before = body.children.length;
      await scanOnce();
      if (!cursor || body.children.length > before) return;
    }
  }
  async function scanOnce() {
    const p = new URLSearchParams({ contains: q.value, scan: 5000 });
    if (tube.value) p.set("tube", tube.value);
    if (state.value) p.set("state", state.value);
    if (cursor) p.set("cursor", cursor);
    const r = await api("GET", "/search?" + p.toString());
    scanned += r.scanned;
    for (const j of r.jobs) {
      body.append(el("tr", { "data-id": j.id }, el("td", { class: "n" }, deadBadge(j), el("a", { href: "#/job/" + j.id }, String(j.id))),
        el("td", {}, tubeLink(j.tube)), el("td", {}, j.state), el("td", { class: "n" }, fmt.num(j.pri)),
        el("td", { class: "n" }, fmt.bytes(j.body_size))));
    }
    cursor = r.next_cursor;
    more.hidden = r.done;
    status.textContent = fmt.num(body.children.length) + " found, " + fmt.num(scanned) + " jobs looked at" + (r.done ? " (done)" : "");
  }
  const form = el("form", { class: "bar", id: "search-form" }, q, tube, state, el("button", { type: "submit" }, "Search"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    body.replaceChildren();
    cursor = null;
    scanned = 0;
    act("search", step);
  });
  more.onclick = () => act("search", step);
  main.append(el("h1", {}, "Search bodies"), form,
    el("table", { id: "search-results" }, el("thead", {}, el("tr", {}, ...["Id", "Tube", "State", "Priority", "Size"].map((h) => el("th", {}, h)))), body),
    el("div", { class: "bar" }, more, status));
  q.focus();
  if (q.value) act("search", step);
};
