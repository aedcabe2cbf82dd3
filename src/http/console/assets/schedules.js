// redstalk console, schedules (#/schedules, #/schedules/NAME; docs/SCHEDULES.md): every
// schedule with its next tick, last job, state and counts, with pause/resume, run and
// delete; a form that creates or replaces one; a schedule's own page with its next
// ticks and this instance's last fires. Names, tubes, bodies and errors are the API's
// data: they reach the page as text only (see app.js `el`), never as markup.
"use strict";

function schedulePath(name, action) {
  return "/schedules/" + encodeURIComponent(name) + (action || "");
}

function scheduleLink(name) {
  return el("a", { href: "#/schedules/" + encodeURIComponent(name), class: "schedule" }, name);
}

// "cron 30 2 * * *" or "every 5 min 0 s".
function specText(s) {
  if (s.cron) return "cron " + s.cron;
  if (s.every_ms) return "every " + fmtMs(s.every_ms);
  return "–";
}

function jobLink(id) {
  return id ? el("a", { href: "#/job/" + id }, String(id)) : "–";
}

// The actions on a schedule (list row or its page); `after` reloads what shows it.
function scheduleActions(s, after) {
  const paused = s.paused;
  const post = (what, action, done) => async () => {
    const r = await act(what, () => api("POST", schedulePath(s.name, action)), done);
    if (r) await after(r);
  };
  return [
    el("button", { type: "button", class: paused ? "resume" : "pause",
      "aria-label": (paused ? "resume " : "pause ") + s.name,
      onclick: post(paused ? "resume" : "pause", paused ? "/resume" : "/pause",
        s.name + (paused ? " resumed" : " paused")) }, paused ? "Resume" : "Pause"), " ",
    el("button", { type: "button", class: "run", "aria-label": "run " + s.name + " now",
      onclick: async () => {
        const r = await act("run", () => api("POST", schedulePath(s.name, "/run")));
        if (!r) return;
        notify(r.deduped ? "no job made: the key's job " + r.id + " still waits" : "put job " + r.id);
        await after(r);
      } }, "Run now"), " ",
    el("button", { type: "button", class: "danger remove", "aria-label": "delete " + s.name,
      onclick: async () => {
        if (!confirm("Delete schedule " + s.name + "? Its jobs already put stay.")) return;
        const r = await act("delete schedule", () => api("DELETE", schedulePath(s.name)), "schedule " + s.name + " deleted");
        if (r) await after(null);
      } }, "Delete"),
  ];
}

// The create-or-replace form: empty fields are left out (the API's defaults); the API
// checks the rest and its error message is shown as it is.
function scheduleForm(reload) {
  const input = (id, label, attrs) => el("label", { for: id }, label + " ",
    el("input", Object.assign({ id: id }, attrs || {})));
  const form = el("form", { id: "schedule-form" }, el("legend", {}, "Create or replace a schedule"),
    el("div", { class: "bar" },
      input("sch-name", "Name", { required: true, size: 16, placeholder: "A-Z a-z 0-9 . _ -" }),
      input("sch-tube", "Tube", { required: true, size: 16 })),
    el("div", { class: "bar" },
      input("sch-cron", "Cron", { size: 16, placeholder: "30 2 * * *" }),
      input("sch-tz", "Time zone", { size: 16, placeholder: "UTC" }),
      el("span", { class: "muted" }, "or"),
      input("sch-every", "every (s)", { type: "number", min: 1, step: "any" })),
    el("div", { class: "bar" },
      input("sch-body", "Body", { size: 30 }),
      input("sch-key", "Key", { size: 16 }),
      el("label", { for: "sch-missed" }, "Missed ticks ",
        el("select", { id: "sch-missed" }, el("option", { value: "skip" }, "skip"),
          el("option", { value: "once" }, "fire once")))),
    el("div", { class: "bar" }, el("button", { type: "submit", id: "sch-submit" }, "Save schedule"),
      el("span", { class: "muted" }, "Give a cron expression or an interval. Replaces a schedule of that name.")));
  const val = (id) => $(id).value.trim();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const doc = { tube: val("sch-tube"), missed: $("sch-missed").value };
    if (val("sch-cron")) doc.cron = val("sch-cron");
    if (val("sch-tz")) doc.tz = val("sch-tz");
    if (val("sch-every")) doc.every_ms = Math.round(Number(val("sch-every")) * 1000);
    if ($("sch-body").value) doc.body = $("sch-body").value;
    if (val("sch-key")) doc.key = val("sch-key");
    const name = val("sch-name");
    const r = await act("save schedule", () => api("PUT", schedulePath(name), doc));
    if (r) { notify("schedule " + name + " saved"); reload(); }
  });
  // Fill the form with a schedule to change it.
  form.edit = (s) => {
    $("sch-name").value = s.name;
    $("sch-tube").value = s.tube;
    $("sch-cron").value = s.cron || "";
    $("sch-tz").value = s.cron ? (s.tz || "") : "";
    $("sch-every").value = s.every_ms ? s.every_ms / 1000 : "";
    $("sch-body").value = s.body || "";
    $("sch-key").value = s.key || "";
    $("sch-missed").value = s.missed || "skip";
    $("sch-name").focus();
  };
  return form;
}

Pages.schedules = async function (main, parts) {
  if (parts.length) return schedulePage(main, parts[0]);
  const body = el("tbody", { id: "schedules-body" });
  const persisted = el("p", { class: "muted", id: "schedules-persisted" });
  const form = scheduleForm(() => load().catch((e) => showError(e.message)));
  function row(s) {
    const next = s.next[0];
    const c = s.cursor;
    const cell = (k, v, n) => el("td", { "data-k": k, class: n ? "n" : null }, v);
    return el("tr", { "data-name": s.name },
      el("td", { "data-k": "name" }, scheduleLink(s.name)),
      el("td", { "data-k": "tube" }, tubeLink(s.tube)),
      cell("spec", specText(s)),
      cell("tz", s.cron ? (s.tz || "UTC") : "–"),
      cell("next", next ? el("time", { datetime: next.utc, title: next.utc }, next.local) : "–"),
      cell("last", jobLink(c.last_job), true),
      cell("state", s.paused ? "paused" : "active"),
      cell("fired", fmt.num(c.fired), true), cell("deduped", fmt.num(c.deduped), true),
      cell("skipped", fmt.num(c.skipped), true),
      el("td", { class: "actions" },
        el("button", { type: "button", class: "edit", onclick: () => form.edit(s) }, "Edit"), " ",
        ...scheduleActions(s, () => load())));
  }
  async function load() {
    const r = await api("GET", "/schedules");
    body.replaceChildren(...r.schedules.map(row));
    if (!r.schedules.length) body.append(el("tr", {}, el("td", { colspan: 11, class: "muted" }, "no schedules")));
    persisted.textContent = r.persisted
      ? "The schedules persist: they are kept where this server keeps its jobs."
      : "The schedules last while this process runs (memory mode without -b): set them again, or with --schedules FILE, after a restart.";
  }
  main.append(el("h1", {}, "Schedules"),
    el("p", { class: "muted" }, "A schedule puts a job into a tube at each tick of a cron expression (read in " +
      "its time zone) or an interval. With a key, a tick while the key's job still waits makes none. Ticks " +
      "missed while nothing ran are skipped, or the latest fired once."),
    persisted,
    el("table", { id: "schedules" }, el("thead", {}, el("tr", {},
      ...["Name", "Tube", "Spec", "Time zone", "Next (local)", "Last job", "State", "Fired", "Deduped", "Skipped", ""]
        .map((h, i) => el("th", { class: i === 5 || (i >= 7 && i <= 9) ? "n" : null }, h)))), body),
    el("fieldset", {}, form));
  await load();
};

// A schedule's page: its definition and cursor, its next ticks, its last fires.
async function schedulePage(main, name) {
  const figures = el("div", { class: "cards", id: "schedule-figures" });
  const next = el("tbody", { id: "schedule-next" });
  const last = el("tbody", { id: "schedule-last" });
  const actions = el("p", { class: "actions", id: "schedule-actions" });
  async function load() {
    const s = await api("GET", schedulePath(name));
    const c = s.cursor;
    figures.replaceChildren(
      card("Tube", tubeLink(s.tube), "schedule-tube"),
      card("Spec", specText(s), "schedule-spec"),
      card("Time zone", s.cron ? (s.tz || "UTC") : "–", "schedule-tz"),
      card("State", s.paused ? "paused" : "active", "schedule-state"),
      card("Key", s.key || "–", "schedule-key"),
      card("Missed ticks", s.missed === "once" ? "fire once" : "skip", "schedule-missed"),
      card("Last job", jobLink(c.last_job), "schedule-last-job"),
      card("Fired", fmt.num(c.fired), "schedule-fired"),
      card("Deduped", fmt.num(c.deduped), "schedule-deduped"),
      card("Skipped", fmt.num(c.skipped), "schedule-skipped"));
    next.replaceChildren(...s.next.map((n) => el("tr", {},
      el("td", { "data-k": "local" }, n.local), el("td", { "data-k": "utc", class: "muted" }, n.utc))));
    if (!s.next.length) next.append(el("tr", {}, el("td", { colspan: 2, class: "muted" }, s.paused ? "paused: no ticks" : "no more ticks")));
    const fires = (s.last || []).slice().reverse();
    last.replaceChildren(...fires.map((f) => el("tr", { "data-result": f.result },
      el("td", { "data-k": "tick" }, f.tick),
      el("td", { "data-k": "result" }, f.result),
      el("td", { "data-k": "job", class: "n" }, jobLink(f.job)),
      el("td", { "data-k": "detail", class: "muted" },
        f.error || (f.skipped !== undefined ? fmt.num(f.skipped) + " ticks passed over" : "")))));
    if (!fires.length) last.append(el("tr", {}, el("td", { colspan: 4, class: "muted" }, "no fires seen by this instance yet")));
    actions.replaceChildren(...scheduleActions(s, async (r) => {
      if (r === null) { location.hash = "#/schedules"; return; }
      await load();
    }));
  }
  main.append(el("h1", {}, "Schedule ", el("span", { id: "schedule-name" }, name)),
    el("p", {}, el("a", { href: "#/schedules" }, "All schedules")),
    figures, actions,
    el("h2", {}, "Next ticks"),
    el("table", { id: "schedule-next-table" }, el("thead", {}, el("tr", {},
      el("th", {}, "Local"), el("th", {}, "UTC"))), next),
    el("h2", {}, "Last fires"),
    el("p", { class: "muted" }, "Fires of this instance since it started (at most 20), newest first."),
    el("table", { id: "schedule-last-table" }, el("thead", {}, el("tr", {},
      el("th", {}, "Tick (UTC)"), el("th", {}, "Result"), el("th", { class: "n" }, "Job"), el("th", {}, "Detail"))), last));
  await load();
}
