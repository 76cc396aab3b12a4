// awcp-ctl ui. Everything shown here came from an executor or the
// network: it is written as text (text nodes), never as HTML.
"use strict";

// The run's token: from the URL's fragment the first time (a browser
// sends a fragment nowhere), then from this origin's storage (bound to
// the port, unlike a cookie). It goes as a bearer token with every
// request for data; changes also carry the CSRF token /api/session gives.
const tokenKey = "awcp-ui-token";
{
  // #token=T, or #token=T&to=/d/ID: the token and the view to open, in
  // one URL (`awcp-ctl ui --open ID`), for a browser that has no token.
  const m = location.hash.match(/^#token=([A-Za-z0-9_-]+)(?:&to=(\/[A-Za-z0-9_\/-]*))?$/);
  if (m) {
    localStorage.setItem(tokenKey, m[1]);
    history.replaceState(null, "", location.pathname + "#" + (m[2] || "/"));
  }
}
const token = localStorage.getItem(tokenKey) || "";
let csrf = "";
const main = document.getElementById("main");
let rows = [];          // the delegations, as the stream last sent them
let filter = "all";     // of the list
let shownRev = "";      // the rev of the delegation shown, if one is
let following = true;   // the output view sticks to its end

// el makes an element: attrs are properties (on… are listeners), children
// strings (as text) or nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k.startsWith("aria-") || k.startsWith("data-") || k === "role" || k === "for") e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

// put replaces node's children with kids, leaving out the empty ones
// (the DOM's own replaceChildren would write null as text).
function put(node, ...kids) {
  node.replaceChildren(...kids.flat().filter(k => k !== null && k !== undefined && k !== false));
}

function toast(msg) {
  const t = document.getElementById("toast");
  t.textContent = msg;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.textContent = ""; }, 8000);
}

async function api(path, body) {
  const opts = body === undefined ? { headers: { Authorization: "Bearer " + token } } : {
    method: "POST", body: JSON.stringify(body),
    headers: { Authorization: "Bearer " + token, "Content-Type": "application/json", "X-AWCP-CSRF": csrf },
  };
  const resp = await fetch(path, opts);
  if (resp.status === 401) unauthorized();
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const e = new Error((data.code ? data.code + ": " : "") + (data.error || resp.statusText) + (data.hint ? " (" + data.hint + ")" : ""));
    e.data = data;
    throw e;
  }
  return data;
}

function when(t) {
  if (!t || t.startsWith("0001")) return "";
  return new Date(t).toLocaleTimeString();
}

function elapsed(r) {
  const from = new Date(r.createdAt), to = r.ended && r.endedAt ? new Date(r.endedAt) : new Date();
  let s = Math.max(0, Math.round((to - from) / 1000));
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return (h ? h + "h" : "") + (h || m ? m + "m" : "") + s + "s";
}

// clip shows text in at most two lines; a click (or Enter) shows it
// whole, and another clips it again.
function clip(cls, text) {
  const toggle = e => { e.preventDefault(); e.currentTarget.classList.toggle("open"); e.currentTarget.setAttribute("aria-expanded", String(e.currentTarget.classList.contains("open"))); };
  return el("div", { class: "clip " + cls, tabindex: "0", role: "button", "aria-expanded": "false", title: "click for the whole text",
    onclick: toggle, onkeydown: e => { if (e.key === "Enter") toggle(e); } }, text);
}

function stateText(r) {
  let s = r.state;
  if (r.awaiting) s = "awaiting " + r.awaiting;
  if (r.staged) s += " (staged: " + r.staged + ")";
  return s;
}

// ---- the list ----

const filters = {
  all: () => true,
  active: r => !r.ended,
  ended: r => r.ended,
  awaiting: r => !!r.awaiting || r.staged === "pending",
};

function renderList() {
  const shown = rows.filter(filters[filter]);
  const bar = el("div", { class: "filters", role: "toolbar", "aria-label": "filter" },
    Object.keys(filters).map(f => el("button", {
      "aria-pressed": String(f === filter), "data-filter": f,
      onclick: () => { filter = f; renderList(); },
    }, f)));
  const table = el("table", { id: "delegations" },
    el("thead", {}, el("tr", {}, ["delegation", "state", "executor", "transport", "access", "elapsed", "last output"].map(
      (h, i) => el("th", { scope: "col", class: i >= 5 ? "wide" : "" }, h)))),
    el("tbody", {}, shown.map(r => el("tr", { class: (r.ended ? "ended" : "") + (r.awaiting ? " awaiting" : ""), "data-id": r.id },
      el("td", { "data-label": "delegation" }, el("a", { href: "#/d/" + encodeURIComponent(r.id) }, r.task || r.id.slice(0, 8)),
        el("div", { class: "muted" }, r.id.slice(0, 8) + " " + r.dir)),
      el("td", { class: "state", "data-label": "state" }, stateText(r), r.channel ? el("div", { class: "muted" }, "executor " + r.channel) : null,
        r.reason ? clip("reason", r.reason) : null),
      el("td", { "data-label": "executor" }, r.executor, r.group ? el("div", {}, el("a", { href: "#/g/" + encodeURIComponent(r.group) }, "attempts " + r.group.slice(0, 8))) : null),
      el("td", { "data-label": "transport" }, r.transport),
      el("td", { "data-label": "access" }, r.access),
      el("td", { class: "wide", "data-label": "elapsed" }, elapsed(r)),
      el("td", { class: "wide mono", "data-label": "last output" }, r.progress ? clip("last", r.progress) : ""),
    ))));
  const empty = shown.length ? null : el("p", { class: "muted" }, "no delegations here");
  put(main, el("h2", {}, "Delegations"), bar, el("div", { class: "scroll" }, table), empty);
}

// ---- one delegation ----

let loading = ""; // the delegation whose page is being fetched

async function showDelegation(id) {
  if (loading === id) return; // one fetch at a time: the stream may ask again meanwhile
  loading = id;
  let d;
  try {
    d = await api("/api/delegations/" + encodeURIComponent(id));
  } catch (e) {
    put(main, el("h2", {}, "Delegation " + id), el("p", {}, e.message));
    return;
  } finally {
    loading = "";
  }
  if (!location.hash.startsWith("#/d/" + encodeURIComponent(id))) return; // left meanwhile
  shownRev = d.rev;
  const parts = [
    el("h2", {}, "Delegation " + d.id),
    el("dl", { class: "kv" },
      el("dt", {}, "state"), el("dd", { class: "state" + (d.ended ? " ended" : ""), id: "state" }, stateText(d)),
      d.channel ? [el("dt", {}, "executor side"), el("dd", {}, d.channel)] : null,
      el("dt", {}, "executor"), el("dd", {}, d.executor),
      el("dt", {}, "directory"), el("dd", { class: "mono" }, d.dir),
      el("dt", {}, "transport"), el("dd", {}, d.transport + ", " + d.access),
      el("dt", {}, "elapsed"), el("dd", {}, elapsed(d)),
      el("dt", {}, "prompt"), el("dd", {}, el("pre", {}, d.prompt)),
      d.group ? [el("dt", {}, "attempts"), el("dd", {}, el("a", { href: "#/g/" + encodeURIComponent(d.group) }, "compare the group's attempts"))] : null,
    ),
  ];
  if (!d.ended) parts.push(el("div", { class: "actions" },
    d.session ? el("button", { id: "close", onclick: ev => change(ev, d, "close", "Close the session? Its agent's session ends, then the lease.", "closing the session") }, "Close session") : null,
    el("button", { id: "cancel", onclick: ev => change(ev, d, "cancel", "Cancel this delegation? The agent is stopped and every access closed.", "cancelled") }, "Cancel")));
  parts.push(...asks(d));
  if (d.failure) parts.push(el("div", { class: "card" }, el("strong", {}, "error " + d.failure.code + ": "), d.failure.message,
    d.failure.hint ? el("div", {}, "hint: " + d.failure.hint) : null));
  if (d.summary) parts.push(el("h3", {}, "Summary"), el("pre", { id: "summary" }, d.summary));
  if (d.notes && d.notes.length) parts.push(el("h3", {}, "Notes"), el("ul", {}, d.notes.map(n => el("li", {}, n))));
  if (d.changes && d.changes.length) parts.push(el("h3", {}, "Changes"), el("ul", { class: "mono" }, d.changes.map(c => el("li", {}, c))));
  if (d.staged) parts.push(el("h3", {}, "Review"), el("div", { id: "review" }, el("button", { onclick: () => showReview(d) }, "Show the staged result")));
  parts.push(el("h3", {}, "Output"), output(d));
  parts.push(el("h3", {}, "Events"), el("div", { class: "scroll" }, el("table", { id: "events" },
    el("thead", {}, el("tr", {}, ["at", "from", "to", "event", "note"].map(h => el("th", { scope: "col" }, h)))),
    el("tbody", {}, d.events.map(e => el("tr", {}, el("td", { "data-label": "at" }, when(e.at)), el("td", { "data-label": "from" }, e.from),
      el("td", { "data-label": "to" }, e.to), el("td", { "data-label": "event" }, e.event), el("td", { "data-label": "note" }, e.note || "")))))));
  parts.push(el("h3", {}, "Audit log"), el("div", { id: "audit" }, auditForm(d.id)));
  const open = document.getElementById("review");
  const keep = open && open.dataset.open === d.id ? open : null;
  put(main, ...parts);
  // A result that waits for review is what the page is opened for: shown.
  if (keep || (d.ended && d.staged === "pending")) showReview(d);
}

// change posts a cancel or a close of delegation d, once confirmed.
async function change(ev, d, what, question, done) {
  if (!confirm(question)) return;
  ev.target.disabled = true;
  try {
    await api("/api/delegations/" + encodeURIComponent(d.id) + "/" + what, {});
    toast(done + ": " + d.id.slice(0, 8));
  } catch (e) { toast(e.message); ev.target.disabled = false; }
}

// asks are the permission requests and the question awaiting an answer.
function asks(d) {
  const out = [];
  for (const p of d.permissions || []) {
    if (p.outcome !== "pending") continue;
    out.push(el("div", { class: "card ask", role: "group", "aria-label": "permission request " + p.requestId },
      el("strong", {}, "The agent asks permission (" + p.requestId + "): "), p.title,
      p.askedBy ? el("div", { class: "muted" }, "asked by " + p.askedBy) : null,
      el("div", { class: "actions" }, (p.options || []).map(o => el("button", {
        class: o.kind && o.kind.startsWith("allow") ? "primary" : "", "data-option": o.optionId,
        onclick: async ev => {
          ev.target.disabled = true;
          try {
            await api("/api/delegations/" + encodeURIComponent(d.id) + "/permit", { request: p.requestId, option: o.optionId });
            toast("answered " + p.requestId + ": " + o.name);
          } catch (e) { toast(e.message); ev.target.disabled = false; }
        },
      }, o.name + " (" + o.kind + ")")))));
  }
  if (d.session && d.awaiting === "the next prompt") {
    const input = el("input", { type: "text", id: "say", "aria-label": "your answer or next prompt", size: 50 });
    out.push(el("div", { class: "card ask" }, el("strong", {}, "The session awaits your next prompt."),
      d.turns && d.turns.length ? el("pre", {}, d.turns[d.turns.length - 1].reply || "") : null,
      el("form", { class: "actions", onsubmit: async ev => {
        ev.preventDefault();
        try { await api("/api/delegations/" + encodeURIComponent(d.id) + "/say", { text: input.value }); toast("sent"); }
        catch (e) { toast(e.message); }
      } }, input, el("button", { type: "submit", class: "primary" }, "Send"))));
  }
  return out;
}

function output(d) {
  const box = el("div", { class: "output mono", id: "output", tabindex: "0", "aria-label": "the agent's output" },
    d.outputDropped ? el("div", { class: "muted" }, d.outputDropped + " earlier lines dropped") : null,
    (d.output || []).map(l => el("div", {}, el("span", { class: "muted" }, when(l.at) + " "), l.text)));
  box.addEventListener("scroll", () => { following = box.scrollTop + box.clientHeight >= box.scrollHeight - 4; });
  requestAnimationFrame(() => { if (following) box.scrollTop = box.scrollHeight; });
  return box;
}

function auditForm(id) {
  const kind = el("select", { "aria-label": "operation" }, ["", "read", "write", "create", "mkdir", "remove", "rename", "setattr", "open", "list"].map(k => el("option", { value: k }, k || "any operation")));
  const path = el("input", { type: "text", "aria-label": "path contains", placeholder: "path contains" });
  const list = el("div", {});
  const load = async ev => {
    if (ev) ev.preventDefault();
    try {
      const q = new URLSearchParams({ kind: kind.value, path: path.value });
      const a = await api("/api/delegations/" + encodeURIComponent(id) + "/audit?" + q);
      const s = a.summary;
      put(list, 
        s ? el("p", {}, s.filesRead + " files read, " + s.filesWritten + " written, " + s.created + " created, " + s.deleted + " deleted, " + s.refused + " refused") : el("p", { class: "muted" }, "no audit log (an archive's result is its diff)"),
        el("div", { class: "scroll" }, el("table", {}, el("tbody", {}, (a.operations || []).map(o => el("tr", {},
          el("td", {}, when(o.at)), el("td", { class: o.refused ? "refused" : "" }, o.kind), el("td", { class: "mono" }, o.path + (o.to ? " → " + o.to : "") + (o.ahead ? " (fetched ahead)" : "")),
          el("td", {}, o.bytes ? o.bytes + " bytes" : ""), el("td", {}, o.err || "")))))),
        a.truncated ? el("p", { class: "muted" }, "more operations than shown: awcp-ctl audit " + id + " has them all") : null);
    } catch (e) { put(list, el("p", {}, e.message)); }
  };
  return el("div", {}, el("form", { class: "actions", onsubmit: load }, kind, path, el("button", { type: "submit" }, "Show the audit log (refusals first)")), list);
}

// ---- review ----

let sideBySide = false;

// reports holds what an apply or discard from this page answered, by
// delegation: the page is redrawn when the delegation changes — as the
// apply itself changes it — and the report must outlive the redraw.
const reports = new Map();

async function showReview(d) {
  const box = document.getElementById("review");
  box.dataset.open = d.id;
  if (d.staged && d.staged !== "pending") {
    // Reviewed already: the staged result is gone, so say what became
    // of it rather than ask for it.
    put(box, reports.has(d.id) ? el("div", { id: "applied" }, appliedText(reports.get(d.id)))
      : el("p", {}, "the result was " + d.staged + " (awcp-ctl status " + d.id + " shows what it changed)"));
    return;
  }
  let res;
  try {
    res = await api("/api/delegations/" + encodeURIComponent(d.id) + "/result");
  } catch (e) { put(box, el("p", {}, e.message)); return; }
  const files = res.files || [];
  const perFile = splitDiff(res.diff || "");
  const diffs = el("div", { id: "diffs" });
  const draw = () => put(diffs, ...perFile.map(f => fileDiff(f)));
  const branch = el("input", { type: "text", "aria-label": "branch name", placeholder: "new branch name" });
  const report = el("div", { id: "applied" });
  const act = async (what, body) => {
    try {
      const out = await api("/api/delegations/" + encodeURIComponent(d.id) + "/" + what, body);
      reports.set(d.id, out);
      put(report, appliedText(out));
    } catch (e) { put(report, el("p", {}, e.message)); }
  };
  put(box, 
    el("p", {}, "Result " + res.state + " for " + res.dir + (res.branch ? "; recorded on branch " + res.branch : "")),
    fileTree(files),
    el("div", { class: "actions" },
      el("label", {}, el("input", { type: "checkbox", checked: sideBySide, onchange: ev => { sideBySide = ev.target.checked; draw(); } }), " side by side"),
      res.state === "pending" ? [
        el("button", { class: "primary", id: "apply", onclick: () => act("apply", {}) }, "Apply to " + res.dir),
        branch, el("button", { onclick: () => act("apply", { branch: branch.value }) }, "Apply to a branch"),
        el("button", { id: "discard", onclick: () => act("discard", {}) }, "Discard"),
      ] : null),
    report,
    res.diffCut ? el("p", { class: "muted" }, "the diff is cut: awcp-ctl diff " + d.id + " has it all") : null,
    diffs);
  draw();
}

// fileTree lists the changed files under their directories; each jumps
// to its diff.
function fileTree(files) {
  const items = [];
  let dir = null;
  files.forEach((f, i) => {
    const cut = f.path.lastIndexOf("/");
    const d = cut < 0 ? "" : f.path.slice(0, cut + 1);
    if (d !== dir) {
      dir = d;
      if (d) items.push(el("li", { class: "muted" }, d));
    }
    items.push(el("li", { class: d ? "in" : "" },
      el("button", { onclick: () => { const t = document.getElementById("diff-" + i); if (t) { t.scrollIntoView(); t.focus(); } } },
        f.status + " " + f.path.slice(d.length)), " ",
      el("span", { class: "muted" }, f.binary ? "binary, " + (f.old_size || 0) + " → " + (f.new_size || 0) + " bytes" : "+" + (f.added || 0) + " −" + (f.removed || 0))));
  });
  return el("ul", { class: "files", "aria-label": "changed files" }, items);
}

function appliedText(out) {
  if (out.discarded && !out.applied) return el("p", {}, "discarded");
  const a = out.applied || {};
  if (a.branch) return el("p", {}, "recorded on branch " + a.branch + " (commit " + (a.commit || "").slice(0, 12) + "); your working tree is as it was");
  const r = a.report || {};
  const list = (label, xs) => xs && xs.length ? el("li", {}, label + ": " + xs.join(", ")) : null;
  return el("div", {}, el("p", {}, (r.conflicts && r.conflicts.length) ? "applied, with conflicts:" : "applied:"),
    el("ul", {}, list("created", r.created), list("modified", r.modified), list("deleted", r.deleted), list("merged", r.merged),
      list("CONFLICTS (yours kept; theirs beside, .awcp-*)", r.conflicts), list("left out", r.ignored)),
    out.discarded && out.discarded.length ? el("p", {}, "the group's other attempts were discarded: " + out.discarded.join(" ")) : null);
}

// splitDiff cuts a unified diff into its files.
function splitDiff(text) {
  const files = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("diff --git ") || !files.length) files.push({ head: line, lines: [] });
    else files[files.length - 1].lines.push(line);
  }
  return files.filter(f => f.head);
}

function lineClass(l) {
  if (l.startsWith("+++") || l.startsWith("---")) return "l muted";
  if (l.startsWith("+")) return "l add";
  if (l.startsWith("-")) return "l del";
  if (l.startsWith("@@")) return "l hunk";
  return "l";
}

function fileDiff(f) {
  const i = document.querySelectorAll(".diff").length;
  let body;
  if (!sideBySide) {
    body = f.lines.map(l => el("div", { class: lineClass(l) }, l));
  } else {
    // Left the old lines, right the new: removals and additions of a
    // run side by side, context on both.
    body = [];
    let dels = [], adds = [];
    const flush = () => {
      for (let k = 0; k < Math.max(dels.length, adds.length); k++) {
        body.push(el("div", { class: dels[k] !== undefined ? "l del" : "l" }, dels[k] ?? ""), el("div", { class: adds[k] !== undefined ? "l add" : "l" }, adds[k] ?? ""));
      }
      dels = []; adds = [];
    };
    for (const l of f.lines) {
      if (l.startsWith("+++") || l.startsWith("---")) continue;
      if (l.startsWith("-")) dels.push(l);
      else if (l.startsWith("+")) adds.push(l);
      else { flush(); body.push(el("div", { class: lineClass(l) }, l), el("div", { class: lineClass(l) }, l)); }
    }
    flush();
    body = [el("div", { class: "sbs" }, body)];
  }
  return el("div", { class: "diff mono", id: "diff-" + i, tabindex: "-1" }, el("div", { class: "file" }, f.head.replace(/^diff --git /, "")), body);
}

// ---- attempts ----

// plural is n things: "1 file", "3 files".
function plural(n, thing) { return n + " " + thing + (n === 1 ? "" : "s"); }

// duration is ns nanoseconds as the command line says them: 100ms, 4.2s, 3m5s.
function duration(ns) {
  const ms = Math.round(ns / 1e6);
  if (ms < 1000) return ms + "ms";
  if (ms < 60000) return (Math.round(ms / 100) / 10) + "s";
  return Math.floor(ms / 60000) + "m" + Math.round((ms % 60000) / 1000) + "s";
}

async function showGroup(group) {
  let attempts;
  try { attempts = await api("/api/groups/" + encodeURIComponent(group)); }
  catch (e) { put(main, el("h2", {}, "Attempts"), el("p", {}, e.message)); return; }
  const report = el("div", { id: "applied" });
  put(main, el("h2", {}, "Attempts of " + group), report, el("div", { class: "attempts" }, attempts.map(a => el("section", { class: "card", "aria-label": "attempt " + a.delegationId },
    el("h3", {}, el("a", { href: "#/d/" + encodeURIComponent(a.delegationId) }, a.executor)),
    el("dl", { class: "kv" },
      el("dt", {}, "state"), el("dd", { class: "state" }, a.state),
      el("dt", {}, "changed"), el("dd", {}, a.result ? a.result : plural(a.files, "file") + ", +" + a.linesAdded + " −" + a.linesRemoved + " lines"),
      el("dt", {}, "took"), el("dd", {}, duration(a.took)),
      el("dt", {}, "check"), el("dd", {}, a.check ? (a.check.passed ? "passed" : "FAILED (exit " + a.check.exit + ")") : "not run (awcp-ctl compare " + group + " --check CMD)")),
    a.summary ? el("pre", {}, a.summary) : null,
    a.result ? null : el("button", { class: "primary", onclick: async () => {
      try { put(report, appliedText(await api("/api/delegations/" + encodeURIComponent(a.delegationId) + "/apply", {}))); }
      catch (e) { put(report, el("p", {}, e.message)); }
    } }, "Apply this one")))));
}

// ---- peers ----

async function showPeers() {
  let peers;
  try { peers = await api("/api/peers"); }
  catch (e) { put(main, el("h2", {}, "Peers"), el("p", {}, e.message)); return; }
  const dialog = el("dialog", { id: "trust-dialog" });
  put(main, el("h2", {}, "Peers"), dialog, peers.length ? el("div", { class: "scroll" }, el("table", { id: "peers" },
    el("thead", {}, el("tr", {}, ["name", "agent id", "address", "state", "trust", "found by", "slots", ""].map(h => el("th", { scope: "col" }, h)))),
    el("tbody", {}, peers.map(p => el("tr", {},
      el("td", {}, p.name), el("td", { class: "mono" }, p.agentId), el("td", { class: "mono" }, p.url || "-"),
      el("td", {}, p.online ? "online" : "offline: " + p.offline),
      el("td", {}, p.impostor ? "trusted; IMPOSTOR SEEN: " + p.impostor : p.keyChanged ? "KEY CHANGED (trusted " + p.trustedFingerprint + ")" : p.trusted ? "trusted" : "not trusted"),
      el("td", {}, p.foundBy || "-"),
      el("td", {}, p.freeSlots !== undefined ? p.freeSlots + "/" + p.maxSlots + " free" : ""),
      el("td", {}, !p.trusted && p.key ? el("button", { onclick: () => askTrust(dialog, p) }, "Trust…") : null)))))) :
    el("p", { class: "muted" }, "no executors found yet (awcp-ctl peers browses the network)"));
}

function askTrust(dialog, p) {
  put(dialog, 
    el("h3", {}, "Trust " + p.name + "?"),
    el("p", {}, "Compare this fingerprint with what `awcp-fs id` prints on the executor. Trust it only if they are the same."),
    el("dl", { class: "kv" }, el("dt", {}, "agent id"), el("dd", { class: "mono" }, p.agentId),
      el("dt", {}, "address"), el("dd", { class: "mono" }, p.url),
      el("dt", {}, "fingerprint"), el("dd", { class: "mono", id: "fingerprint" }, p.fingerprint)),
    el("div", { class: "actions" },
      el("button", { class: "primary", onclick: async () => {
        try { await api("/api/peers/" + encodeURIComponent(p.agentId) + "/trust", { key: p.key }); dialog.close(); toast("trusted " + p.name); showPeers(); }
        catch (e) { toast(e.message); }
      } }, "They match: trust this key"),
      el("button", { onclick: () => dialog.close() }, "Cancel")));
  dialog.showModal();
}

// ---- routing and the stream ----

function route() {
  const h = location.hash || "#/";
  shownRev = "";
  for (const a of document.querySelectorAll("nav a")) a.removeAttribute("aria-current");
  let m;
  if ((m = h.match(/^#\/d\/(.+)$/))) { following = true; showDelegation(decodeURIComponent(m[1])); }
  else if ((m = h.match(/^#\/g\/(.+)$/))) showGroup(decodeURIComponent(m[1]));
  else if (h === "#/peers") { document.getElementById("nav-peers").setAttribute("aria-current", "page"); showPeers(); }
  else { document.getElementById("nav-delegations").setAttribute("aria-current", "page"); renderList(); }
}

function unauthorized() {
  document.getElementById("live").textContent = "no access";
  put(main, el("h2", {}, "No access"), el("p", {}, "This page needs the URL `awcp-ctl ui` printed (with its token): open that URL, or this view with `awcp-ctl ui --open ID` (the delegation's id, or a group's). A token of an earlier run no longer works."));
}

// connect follows the server-sent events of /api/stream, read with fetch
// (an EventSource cannot send the token), and reconnects when cut.
async function connect() {
  const live = document.getElementById("live");
  for (;;) {
    try {
      const resp = await fetch("/api/stream", { headers: { Authorization: "Bearer " + token } });
      if (resp.status === 401) { unauthorized(); return; }
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const msg = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          const data = msg.split("\n").filter(l => l.startsWith("data: ")).map(l => l.slice(6)).join("\n");
          if (msg.includes("event: delegations") && data) onDelegations(JSON.parse(data));
        }
      }
    } catch (e) { /* cut: try again */ }
    live.textContent = "reconnecting…";
    await new Promise(r => setTimeout(r, 1000));
  }
}

function onDelegations(list) {
  rows = list;
  document.getElementById("live").textContent = "live · " + new Date().toLocaleTimeString();
  const h = location.hash || "#/";
  if (h === "#/" || h === "#") renderList();
  const m = h.match(/^#\/d\/(.+)$/);
  if (m) {
    const r = rows.find(x => x.id === decodeURIComponent(m[1]));
    if (r && r.rev !== shownRev) showDelegation(r.id);
  }
}

window.addEventListener("hashchange", route);
let gAt = 0; // when g was pressed
document.addEventListener("keydown", ev => {
  // g then d / p: the two top views, as a keyboard user expects of a
  // dashboard; never while typing.
  if (ev.target.matches("input, textarea, select")) return;
  if (ev.key === "g") { gAt = Date.now(); return; }
  if (gAt && Date.now() - gAt < 1500) {
    if (ev.key === "d") location.hash = "#/";
    if (ev.key === "p") location.hash = "#/peers";
    gAt = 0;
  }
});
(async () => {
  if (!token) { unauthorized(); return; }
  try { csrf = (await api("/api/session")).csrf; } catch (e) { return; }
  route();
  connect();
})();
