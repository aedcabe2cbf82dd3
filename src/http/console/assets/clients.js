// redstalk console, the clients page (#/clients): this instance's live beanstalk
// connections, paged by the API's cursors (the `Pager` of app.js), with their used and watched tubes, the jobs each
// holds and the reserve each is blocked in. Every value reaches the page as text (see
// app.js `el`).
"use strict";

const CLIENTS_PAGE = 100;

// A time the API gave (ms since the epoch) as "3 s ago" against the server's `now`.
function clientAgo(at, now) {
  return fmt.ago(Math.max(0, Math.round((now - at) / 1000)));
}

function clientRow(c, now) {
  const list = (items, count, link) => {
    const shown = items.map(link);
    const parts = [];
    shown.forEach((x, i) => { if (i) parts.push(", "); parts.push(x); });
    if (count > items.length) parts.push(" … (" + fmt.num(count) + ")");
    return parts;
  };
  const peer = [c.peer || "–"];
  if (c.relayed_from) peer.push(" ", el("span", { class: "badge", title: "relayed by standby " + c.relayed_from }, "relayed"));
  const roles = [c.producer ? "producer" : null, c.worker ? "worker" : null].filter(Boolean).join(", ") || "–";
  const held = c.held_count
    ? list(c.held, c.held_count, (j) => el("a", { href: "#/job/" + j.id, class: "held",
      title: "in " + j.tube + ", " + fmt.secs(j.time_left) + " left" }, String(j.id)))
    : ["–"];
  let blocked = "–";
  if (c.blocked) {
    const left = c.blocked.until === null || c.blocked.until === undefined ? "no timeout"
      : fmt.secs(Math.max(0, Math.round((c.blocked.until - now) / 1000))) + " left";
    blocked = el("span", { class: "blocked" }, "since ", clientAgo(c.blocked.since, now), ", " + left + ", on ",
      ...list(c.blocked.tubes, c.blocked.tubes.length, tubeLink));
  }
  const last = c.last_command
    ? [c.last_command.command + " ", clientAgo(c.last_command.at, now)] : ["–"];
  return el("tr", { "data-client": c.id },
    el("td", { class: "n" }, String(c.id)), el("td", {}, ...peer), el("td", {}, clientAgo(c.since, now)),
    el("td", { class: "using" }, tubeLink(c.using)),
    el("td", { class: "watching" }, ...list(c.watching, c.watching_count, tubeLink)),
    el("td", {}, roles), el("td", {}, ...held), el("td", {}, blocked), el("td", {}, ...last));
}

Pages.clients = async function (main) {
  const body = el("tbody", { id: "clients-body" });
  const prev = el("button", { type: "button", id: "clients-prev" }, "← Previous");
  const next = el("button", { type: "button", id: "clients-next" }, "Next →");
  const refresh = el("button", { type: "button", id: "clients-refresh" }, "Refresh");
  const where = el("span", { class: "muted", id: "clients-where" });
  main.append(el("h1", {}, "Clients"),
    el("p", { class: "muted" }, "This instance's beanstalk connections (in leader mode, the leader's, " +
      "relayed ones included)."),
    el("table", { id: "clients" }, el("thead", {}, el("tr", {},
      ...["Id", "Peer", "Connected", "Using", "Watching", "Role", "Holds", "Blocked in reserve", "Last command"]
        .map((h) => el("th", {}, h)))), body),
    el("div", { class: "bar" }, prev, next, refresh, where));
  let connections = null;
  const pager = new Pager(prev, next, async (cursor) => {
    const r = await api("GET", "/clients?limit=" + CLIENTS_PAGE + cursorParam(cursor));
    body.replaceChildren(...r.clients.map((c) => clientRow(c, r.now)));
    if (!r.clients.length) body.append(el("tr", {}, el("td", { colspan: 9, class: "muted" }, "no connections")));
    where.textContent = "page " + (pager.index + 1) + ", " + fmt.num(r.total) + " connections" +
      (r.held_complete ? "" : " (held jobs: only the first tubes were looked through)");
    return r.next_cursor;
  });
  const reload = () => pager.show();
  refresh.onclick = reload;
  await pager.reload();
  // Reloaded when the number of connections changes (the live snapshot says so).
  onSnapshot((snap) => {
    const n = snap.stats && snap.stats["current-connections"];
    if (connections !== null && n !== connections) reload();
    connections = n;
  });
};
