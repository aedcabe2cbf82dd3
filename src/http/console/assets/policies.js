// redstalk console, tube policies (#/policies; docs/POLICIES.md): the rules, whether
// they persist, a form that sets the rule of a tubes pattern (`name`, `prefix*` or
// `*`) and the removal of one; and which rule governs a tube (the tube page). Every
// value reaches the page as text (see app.js `el`).
"use strict";

// The rule of `rules` (the API's list) that governs `tube`, as the server picks it: the
// tube's own name, else the longest prefix (`*` is the empty one), else none.
function governingRule(rules, tube) {
  let best = null;
  let bestLen = -1;
  for (const r of rules || []) {
    if (r.tubes === tube) return r;
    if (!r.tubes.endsWith("*")) continue;
    const prefix = r.tubes.slice(0, -1);
    if (tube.startsWith(prefix) && prefix.length > bestLen) { best = r; bestLen = prefix.length; }
  }
  return best;
}

// A duration in ms: "500 ms", "1.5 s", else fmt.secs of whole seconds.
function fmtMs(ms) {
  if (ms === undefined || ms === null) return "–";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000 && ms % 1000) return (ms / 1000).toFixed(1) + " s";
  return fmt.secs(Math.round(ms / 1000));
}

// "after 5 reserves or 2 timeouts", "–" without a dead letter rule.
function deadLetterText(d) {
  if (!d) return "–";
  const parts = [];
  if (d.reserves) parts.push(fmt.num(d.reserves) + " reserves");
  if (d.timeouts) parts.push(fmt.num(d.timeouts) + " timeouts");
  return parts.length ? "buried after " + parts.join(" or ") : "–";
}

// "1 s × 2 up to 1 min 0 s, jitter 20%", "–" without a backoff rule.
function backoffText(b) {
  if (!b) return "–";
  return fmtMs(b.base_ms) + " × " + b.factor + " up to " + fmtMs(b.max_ms) +
    (b.jitter ? ", jitter " + Math.round(b.jitter * 100) + "%" : "");
}

// One line that says what a rule does.
function ruleText(r) {
  const parts = [];
  if (r.dead_letter) parts.push("dead letter: " + deadLetterText(r.dead_letter));
  if (r.backoff) parts.push("release backoff: " + backoffText(r.backoff));
  return parts.join("; ") || "no limits";
}

function policyPath(tubes) { return "/policies/" + encodeURIComponent(tubes); }

// The set-a-rule form: empty fields are left out; the API checks the rest and its error
// message is shown as it is.
function policyForm(reload) {
  const field = (id, label, attrs) => el("label", { for: id }, label + " ",
    el("input", Object.assign({ id: id, type: "number", min: 0 }, attrs || {})));
  const tubes = el("input", { id: "pol-tubes", placeholder: "name, prefix* or *", required: true,
    "aria-label": "tubes pattern", size: 20 });
  const form = el("form", { id: "policy-form" }, el("legend", {}, "Set the rule of a tubes pattern"),
    el("div", { class: "bar" }, el("label", { for: "pol-tubes" }, "Tubes "), tubes),
    el("div", { class: "bar" }, el("span", { class: "muted" }, "Dead letter (bury):"),
      field("pol-reserves", "after reserves", { min: 1 }), field("pol-timeouts", "or lapsed TTRs", { min: 1 })),
    el("div", { class: "bar" }, el("span", { class: "muted" }, "Release backoff:"),
      field("pol-base", "base ms"), field("pol-factor", "factor", { step: "any", placeholder: "2" }),
      field("pol-max", "max ms"), field("pol-jitter", "jitter", { step: "any", min: 0, max: 1, placeholder: "0" })),
    el("div", { class: "bar" }, el("button", { type: "submit", id: "pol-submit" }, "Set rule"),
      el("span", { class: "muted" }, "Replaces the pattern's rule; empty fields are left out.")));
  const val = (id) => $(id).value.trim();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const policy = {};
    const dead = {};
    if (val("pol-reserves")) dead.reserves = Number(val("pol-reserves"));
    if (val("pol-timeouts")) dead.timeouts = Number(val("pol-timeouts"));
    if (Object.keys(dead).length) policy.dead_letter = dead;
    const backoff = {};
    for (const [id, k] of [["pol-base", "base_ms"], ["pol-factor", "factor"], ["pol-max", "max_ms"], ["pol-jitter", "jitter"]]) {
      if (val(id)) backoff[k] = Number(val(id));
    }
    if (Object.keys(backoff).length) policy.backoff = backoff;
    const name = tubes.value.trim();
    const r = await act("set policy", () => api("PUT", policyPath(name), policy));
    if (r) { notify("rule set for " + name); reload(); }
  });
  // Fill the form with a rule to change it.
  form.edit = (r) => {
    tubes.value = r.tubes;
    const d = r.dead_letter || {};
    const b = r.backoff || {};
    $("pol-reserves").value = d.reserves || "";
    $("pol-timeouts").value = d.timeouts || "";
    $("pol-base").value = r.backoff ? b.base_ms : "";
    $("pol-factor").value = r.backoff ? b.factor : "";
    $("pol-max").value = r.backoff ? b.max_ms : "";
    $("pol-jitter").value = r.backoff ? b.jitter : "";
    tubes.focus();
  };
  return form;
}

Pages.policies = async function (main) {
  const body = el("tbody", { id: "policies-body" });
  const persisted = el("p", { class: "muted", id: "policies-persisted" });
  const form = policyForm(() => load().catch((e) => showError(e.message)));
  function row(r) {
    const d = r.dead_letter || {};
    const b = r.backoff;
    const cell = (k, v, n) => el("td", { "data-k": k, class: n ? "n" : null }, v);
    return el("tr", { "data-tubes": r.tubes },
      el("td", { "data-k": "tubes", class: "pattern" }, r.tubes),
      cell("reserves", d.reserves ? fmt.num(d.reserves) : "–", true),
      cell("timeouts", d.timeouts ? fmt.num(d.timeouts) : "–", true),
      cell("base", b ? fmtMs(b.base_ms) : "–", true), cell("factor", b ? String(b.factor) : "–", true),
      cell("max", b ? fmtMs(b.max_ms) : "–", true),
      cell("jitter", b ? Math.round(b.jitter * 100) + "%" : "–", true),
      el("td", { class: "actions" },
        el("button", { type: "button", class: "edit", onclick: () => form.edit(r) }, "Edit"), " ",
        el("button", { type: "button", class: "danger remove", "aria-label": "remove the rule for " + r.tubes,
          onclick: async () => {
            if (!confirm("Remove the rule for " + r.tubes + "? Its tubes' jobs are no longer buried or backed off by it.")) return;
            const ok = await act("remove policy", () => api("DELETE", policyPath(r.tubes)), "rule for " + r.tubes + " removed");
            if (ok) await load();
          } }, "Remove")));
  }
  async function load() {
    const r = await api("GET", "/policies");
    body.replaceChildren(...r.policies.map(row));
    if (!r.policies.length) body.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no rules")));
    persisted.textContent = r.persisted
      ? "The rules persist: they are kept where this server keeps its jobs."
      : "The rules last while this process runs (memory mode without -b): set them again, or with --policies FILE, after a restart.";
  }
  const groups = el("tr", {}, el("th", {}), el("th", { colspan: 2, class: "n" }, "Dead letter after"),
    el("th", { colspan: 4, class: "n" }, "Release backoff"), el("th", {}));
  main.append(el("h1", {}, "Policies"),
    el("p", { class: "muted" }, "What a tube's failing jobs get: a dead letter rule buries a job once it has " +
      "been reserved, or its TTR has lapsed, so many times (each kick gives the limits again); a backoff " +
      "rule delays a release with delay 0 by base × factor^releases, at most max, ± jitter. The most " +
      "specific pattern governs a tube: its own name, else the longest prefix*, else *."),
    persisted,
    el("table", { id: "policies" }, el("thead", {}, groups, el("tr", {},
      ...["Tubes", "Reserves", "Timeouts", "Base", "Factor", "Max", "Jitter", ""].map((h, i) =>
        el("th", { class: i >= 1 && i <= 6 ? "n" : null }, h)))), body),
    el("fieldset", {}, form));
  await load();
};

// The tube page's line: the rule that governs tube `name`, with a link to the page.
function tubePolicyLine(name) {
  const line = el("p", { id: "tube-policy", class: "muted" }, "Policy: …");
  api("GET", "/policies").then((r) => {
    const rule = governingRule(r.policies, name);
    line.replaceChildren(...(rule
      ? ["Policy ", el("a", { href: "#/policies", class: "pattern" }, rule.tubes), ": " + ruleText(rule)]
      : ["No policy governs this tube (", el("a", { href: "#/policies" }, "policies"), ")."]));
    line.dataset.tubes = rule ? rule.tubes : "";
  }, (e) => { line.textContent = "Policy: unknown (" + e.message + ")"; });
  return line;
}
