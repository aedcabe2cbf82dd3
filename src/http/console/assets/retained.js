// redstalk console, retention (docs/RETENTION.md; --retain): a job's history drawn as a
// timeline (on a live job's page and a deleted one's), the page of a deleted job's
// retained record (#/job/ID answers it when the job is gone), and the Retained page
// (#/retained: the records newest first, by tube or key, with the limits and totals).
// The Retained link shows only when the server retains. Tubes, keys, bodies and
// addresses are the API's data: they reach the page as text only (app.js `el`).
"use strict";

// A history as a timeline: one item per kept event (its time, its event, who did it),
// and where the server kept the first events and the latest, how many between.
function historyTimeline(h) {
  const list = el("ol", { class: "timeline", id: "job-history" });
  (h.history || []).forEach((e, i) => {
    if (i === 8 && h.history_dropped > 0) {
      list.append(el("li", { class: "gap", id: "history-gap" },
        fmt.num(h.history_dropped) + " events between not kept"));
    }
    const who = e.conn === 0 ? (e.event === "delete" || e.event === "edit" || e.event === "flush" ? "API or server" : "")
      : "connection " + e.conn + (e.addr ? " (" + e.addr + ")" : "");
    const at = new Date(e.at_ms);
    list.append(el("li", { "data-event": e.event, "data-conn": e.conn },
      el("time", { datetime: e.at, title: at.toLocaleString() }, e.at.replace("T", " ").replace("Z", " UTC")),
      el("span", { class: "event ev-" + e.event }, e.event.replace("_", " ")),
      el("span", { class: "who muted" }, who)));
  });
  if (!list.children.length) list.append(el("li", { class: "muted" }, "no events"));
  return list;
}

// A retained body (when --retain-bodies kept it) as the API gave it.
function retainedBodyText(r) {
  if (r.body !== undefined) return r.body;
  if (r.body_base64 !== undefined) {
    const bytes = Uint8Array.from(atob(r.body_base64), (c) => c.charCodeAt(0));
    return hexDump(bytes, 64 * 1024);
  }
  return "";
}

// #/job/ID of a deleted job whose record the server retains.
async function deletedJobPage(main, j) {
  const full = await api("GET", "/jobs/" + j.id + "?body=full");
  const rows = [["Id", j.id], ["Tube", tubeLink(j.tube)], ["Key", j.key || "–"],
    ["State", el("span", { class: "badge warn", id: "job-state" }, "deleted")],
    ["Deleted", el("time", { datetime: j.deleted_at }, j.deleted_at)],
    ["Created", el("time", { datetime: j.created_at }, j.created_at)],
    ["Priority", fmt.num(j.pri)], ["Age at delete", fmt.secs(j.age)], ["Delay", fmt.secs(j.delay)],
    ["TTR", fmt.secs(j.ttr)], ["Reserves", fmt.num(j.reserves)], ["Timeouts", fmt.num(j.timeouts)],
    ["Releases", fmt.num(j.releases)], ["Buries", fmt.num(j.buries)], ["Kicks", fmt.num(j.kicks)],
    ["Body", fmt.bytes(j.body_size)]];
  const body = full.body_kept
    ? [el("pre", { class: "body", id: "job-body", tabindex: 0 }, retainedBodyText(full)),
      ...(full.body_truncated ? [el("p", { class: "muted" }, "shown in part")] : [])]
    : [el("p", { class: "muted", id: "body-note" },
      "The body was not kept (the server keeps deleted jobs' bodies with --retain-bodies).")];
  main.append(el("h1", {}, "Job " + j.id + " ", el("span", { class: "badge warn" }, "deleted")),
    el("p", { class: "muted" }, "This job was deleted; the server keeps its record for a while (",
      el("a", { href: "#/retained" }, "retained jobs"), ")."),
    // What happened to it first: that is what a deleted job's page is opened for.
    el("h2", {}, "History"), historyTimeline(full),
    el("h2", {}, "Figures at its delete"),
    el("table", { id: "job-figures" }, el("tbody", {}, ...rows.map(([k, v]) =>
      el("tr", {}, el("th", {}, k), el("td", { "data-k": k }, v))))),
    el("h2", {}, "Body"), ...body);
}

Pages.retained = async function (main, parts, params) {
  const summary = el("p", { id: "retained-summary", class: "muted" });
  const body = el("tbody", { id: "retained-body" });
  const tube = el("input", { id: "retained-tube", placeholder: "any tube", "aria-label": "tube", value: params.get("tube") || "" });
  const key = el("input", { id: "retained-key", placeholder: "key (needs a tube)", "aria-label": "key", value: params.get("key") || "" });
  const prev = el("button", { type: "button", id: "retained-prev" }, "← Previous");
  const next = el("button", { type: "button", id: "retained-next" }, "Next →");
  const pager = new Pager(prev, next, async (c) => {
    const p = new URLSearchParams({ limit: 50 });
    if (tube.value) p.set("tube", tube.value);
    if (tube.value && key.value) p.set("key", key.value);
    const r = await api("GET", "/retained?" + p.toString() + cursorParam(c));
    const l = r.retention;
    summary.textContent = l.on
      ? fmt.num(r.records) + " records, " + fmt.bytes(r.bytes) + " (kept " + fmt.secs(Math.floor(l.keep_ms / 1000)) +
        ", at most " + fmt.num(l.max_jobs) + " records and " + fmt.bytes(l.max_bytes) + (l.bodies ? ", with bodies" : ", without bodies") + ")"
      : "Retention is off: this server keeps nothing of deleted jobs (start it with --retain DURATION).";
    body.replaceChildren(...r.jobs.map((j) => el("tr", { "data-id": j.id },
      el("td", { class: "n" }, el("a", { href: "#/job/" + j.id }, String(j.id))), el("td", {}, tubeLink(j.tube)),
      el("td", { class: "key" }, j.key || ""), el("td", {}, el("time", { datetime: j.deleted_at }, j.deleted_at)),
      el("td", { class: "n" }, fmt.num(j.reserves)), el("td", { class: "n" }, fmt.num(j.releases)),
      el("td", { class: "n" }, fmt.num(j.timeouts)), el("td", { class: "n" }, fmt.bytes(j.body_size)))));
    if (!r.jobs.length) body.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no retained jobs")));
    return r.next_cursor;
  });
  const form = el("form", { class: "bar", id: "retained-form" }, tube, key, el("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    pager.restart().catch((e) => showError(e.message));
  });
  main.append(el("h1", {}, "Retained jobs"), summary, form,
    el("table", { id: "retained" }, el("thead", {}, el("tr", {},
      ...["Id", "Tube", "Key", "Deleted", "Reserves", "Releases", "Timeouts", "Size"].map((h, i) =>
        el("th", { class: i === 0 || i > 3 ? "n" : null }, h)))), body),
    el("div", { class: "bar" }, prev, next));
  await pager.reload();
};

// The Retained link, shown when the server retains (asked once the page is up; a
// refusal before a login leaves it hidden).
window.addEventListener("DOMContentLoaded", () => {
  api("GET", "/retained?limit=1").then((r) => {
    if (r && r.retention && r.retention.on) $("nav-retained").hidden = false;
  }, () => {});
});
