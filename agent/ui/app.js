// impulse-agent status page: polls status.json (the GET /v1/status
// document) every second and redraws. No framework, no build step. Every
// value from the server goes in as text (textContent), never as markup:
// backend IDs and check names come from Consul.
"use strict";

const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";

// el builds an element: attrs are attributes ("class", "data-*", "title"),
// children strings (text) or nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

// ago formats the time since t (an RFC 3339 string) against now (ms).
function ago(t, now) {
  if (!t) return "—";
  const s = Math.round((now - Date.parse(t)) / 1000);
  return s < 0 ? "in " + dur(-s) : dur(s) + " ago";
}

function dur(s) {
  if (s < 120) return s + "s";
  if (s < 7200) return Math.round(s / 60) + "m";
  if (s < 172800) return Math.round(s / 3600) + "h";
  return Math.round(s / 86400) + "d";
}

function timeCell(t, now) {
  return el("td", { title: t || "" }, ago(t, now));
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function renderHeader(doc) {
  const ready = document.getElementById("ready");
  ready.textContent = doc.ready.status.replace("_", " ");
  ready.className = "badge " + { ok: "good", degraded: "warn", not_ready: "bad" }[doc.ready.status];
  document.getElementById("generation").textContent = "generation " + doc.generation;
  document.getElementById("updated").textContent = "updated " + new Date(doc.time).toLocaleTimeString();
  const reasons = [...doc.ready.reasons.map((r) => ["bad", r]), ...doc.ready.degraded.map((r) => ["warn", r])];
  const ul = document.getElementById("readiness");
  ul.replaceChildren(...(reasons.length ? reasons.map(([c, r]) => el("li", { class: c }, r)) : [el("li", { class: "good" }, "ready: every listener serving, discovery synced")]));
}

function renderListeners(doc) {
  const now = Date.parse(doc.time);
  fill(document.querySelector("#listeners tbody"), doc.listeners.map((l) => {
    const certs = el("td");
    for (const c of l.certificates) {
      const days = c.expires_in_seconds / 86400;
      const cls = days < 0 ? "bad" : days < 14 ? "warn" : "good";
      certs.append(el("div", { class: cls, title: c.not_after }, c.name + ": " + (days < 0 ? "expired " + ago(c.not_after, now) : "expires " + ago(c.not_after, now))));
    }
    if (!l.certificates.length) certs.append("—");
    return el("tr", { class: "listener", "data-name": l.name },
      el("td", {}, l.name), el("td", {}, l.protocols.join(", ")), el("td", {}, l.address),
      el("td", {}, l.udp_address || "—"), el("td", {}, l.tcp_address || "—"), el("td", { class: "num" }, l.in_flight), certs);
  }));
}

function renderRoutes(doc) {
  fill(document.querySelector("#routes tbody"), doc.routes.map((r, i) => el("tr", { class: "route", "data-upstream": r.upstream },
    el("td", { class: "num" }, i + 1), el("td", {}, r.host || "*"), el("td", {}, r.path_prefix),
    el("td", {}, r.methods.length ? r.methods.join(", ") : "any"), el("td", {}, r.upgrades.join(", ") || "none"),
    el("td", {}, r.upstream), el("td", {}, r.source),
    el("td", { class: r.conflicts && r.conflicts.length ? "warn" : "" },
      (r.conflicts || []).map((c) => c.upstream + " (" + c.source + ", " + c.rule + ")").join("; ") || "—"))));
}

// rates returns, per bucket, the requests and 5xx per second of upstream name.
function rates(traffic, name) {
  return traffic.buckets.map((b) => {
    const c = b.upstreams[name] || {};
    const total = (c["1xx"] || 0) + (c["2xx"] || 0) + (c["3xx"] || 0) + (c["4xx"] || 0) + (c["5xx"] || 0) + (c.other || 0);
    const secs = b.seconds > 0 ? b.seconds : 1;
    return { req: total / secs, err: (c["5xx"] || 0) / secs };
  });
}

// chart draws requests/s (blue bars) and 5xx/s (red bars over them) per
// bucket, the newest at the right edge, over the ring's whole span.
function chart(traffic, name, slots) {
  const W = 360, H = 64, bw = W / slots;
  const pts = rates(traffic, name).slice(-slots);
  const top = Math.max(1, ...pts.map((p) => p.req));
  const s = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H + 14}`, width: W, height: H + 14, role: "img",
    "aria-label": "requests and 5xx per second of " + name });
  s.append(svg("rect", { class: "frame", x: 0, y: 0, width: W, height: H }));
  pts.forEach((p, i) => {
    const x = W - (pts.length - i) * bw;
    for (const [v, cls] of [[p.req, "req"], [p.err, "err"]]) {
      const h = (v / top) * (H - 2);
      if (h > 0) s.append(svg("rect", { class: cls, x: x.toFixed(2), y: (H - h).toFixed(2), width: Math.max(bw - 0.5, 0.5).toFixed(2), height: h.toFixed(2) }));
    }
  });
  const last = pts.length ? pts[pts.length - 1] : { req: 0, err: 0 };
  const label = svg("text", { x: 2, y: H + 12, class: "label" });
  label.textContent = `now ${last.req.toFixed(1)} req/s, ${last.err.toFixed(1)} 5xx/s · top ${top.toFixed(1)} req/s · last ${Math.round(slots * traffic.bucket_seconds / 60)} min`;
  s.append(label);
  return s;
}

function statusCell(b) {
  return el("td", { class: "status s-" + b.status, title: b.status_reason || "" },
    b.status.toUpperCase(), b.status_reason ? el("div", { class: "reason" }, b.status_reason) : null);
}

function checkCell(b, now) {
  if (!b.last_check) return el("td", { class: "muted" }, b.health_reason === "no health_check configured" ? "no check" : "—");
  const c = b.last_check;
  return el("td", { class: c.ok ? "good" : "bad", title: c.at }, (c.ok ? "passed" : "failed: " + c.reason) + ", " + ago(c.at, now),
    b.failed_checks ? el("div", { class: "reason" }, b.failed_checks + " failed in a row") : null);
}

function weightCell(b, now) {
  const ramp = b.slow_start_until ? el("div", { class: "reason", title: b.slow_start_until }, "slow start, full " + ago(b.slow_start_until, now)) : null;
  return el("td", { class: "num" }, b.weight === b.configured_weight ? String(b.weight) : b.weight + " / " + b.configured_weight, ramp);
}

function backendRow(b, now) {
  const r = b.responses || {};
  const addrs = b.resolution && b.resolution.addresses ? b.resolution.addresses.join(", ") : "";
  const ej = b.ejected ? "until " + new Date(b.ejected_until).toLocaleTimeString() : b.ejections ? b.ejections + " before" : "—";
  return el("tr", { class: "backend", "data-upstream": b.upstream, "data-id": b.id, "data-status": b.status, "data-health": b.health },
    el("td", {}, b.id, el("div", { class: "reason" }, b.source + ", " + b.protocol)),
    el("td", {}, b.address, addrs ? el("div", { class: "reason" }, addrs) : null),
    statusCell(b),
    checkCell(b, now),
    timeCell(b.last_change, now),
    el("td", {}, b.membership),
    el("td", { class: b.ejected ? "bad" : "muted" }, ej),
    weightCell(b, now),
    el("td", { class: "num" }, b.in_flight),
    el("td", { class: "num" }, b.requests),
    ...["1xx", "2xx", "3xx", "4xx", "5xx"].map((k) => el("td", { class: "num" + (k === "5xx" && r[k] ? " bad" : "") }, r[k] || 0)),
    el("td", { class: "num" + (r.errors ? " bad" : "") }, r.errors || 0));
}

const BACKEND_HEAD = ["Backend", "Address", "Status", "Last check", "Last change", "Member", "Ejection", "Weight",
  "In flight", "Sessions", "1xx", "2xx", "3xx", "4xx", "5xx", "Errors"];

function renderUpstreams(doc) {
  const now = Date.parse(doc.time);
  const byUp = {};
  for (const b of doc.backends) (byUp[b.upstream] = byUp[b.upstream] || []).push(b);
  const boxes = doc.upstreams.map((u) => {
    const rows = (byUp[u.name] || []).map((b) => backendRow(b, now));
    const health = u.backends_up === 0 ? "bad" : u.backends_up < u.backends_total ? "warn" : "good";
    const r = u.responses || {};
    const head = el("div", { class: "uphead" },
      el("h3", {}, u.name),
      el("span", { class: "badge " + health }, `${u.backends_up}/${u.backends_total} up`),
      el("span", { class: "muted" }, `${u.source} · ${u.load_balancing} · in flight ${u.in_flight}` +
        (u.max_requests ? ` of ${u.max_requests}` : "") + ` · queue ${u.queue}` +
        ` · 2xx ${r["2xx"] || 0} 4xx ${r["4xx"] || 0} 5xx ${r["5xx"] || 0}`),
      u.discovery_pending ? el("span", { class: "badge warn" }, "discovery pending") : null,
      ...(u.catalog_problems || []).map((p) => el("div", { class: "warn" }, p)));
    const table = el("table", { class: "backends" },
      el("thead", {}, el("tr", {}, ...BACKEND_HEAD.map((h) => el("th", {}, h)))),
      el("tbody", {}, ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: BACKEND_HEAD.length, class: "bad" }, "no backend"))])));
    return el("div", { class: "upstream", "data-name": u.name }, head, chart(doc.traffic, u.name, doc.traffic.bucket_count), table);
  });
  document.getElementById("upstreams").replaceChildren(...boxes);
}

function renderWatches(doc) {
  const now = Date.parse(doc.time);
  document.getElementById("no-watches").hidden = doc.watches.length > 0;
  fill(document.querySelector("#watches tbody"), doc.watches.map((w) => el("tr", { class: "watch", "data-service": w.service || "" },
    el("td", {}, w.kind === "service" ? w.service : w.kind), el("td", { class: "mono" }, w.query),
    el("td", {}, w.upstreams.join(", ") || "—"), el("td", { class: w.synced ? "good" : "warn" }, w.synced ? "yes" : "no"),
    timeCell(w.last_success, now),
    el("td", { class: w.stale ? "bad" : "" }, dur(Math.round(w.staleness_seconds)) + (w.stale ? " (stale)" : "")),
    el("td", { class: "num" }, w.instances), el("td", { class: "num" + (w.not_passing ? " bad" : "") }, w.not_passing),
    el("td", { class: w.last_error ? "bad" : "muted" }, w.last_error || "—"),
    el("td", { class: w.readiness.length ? "warn" : "muted" }, w.readiness.join("; ") || "—"))));
}

function render(doc) {
  renderHeader(doc);
  renderListeners(doc);
  renderRoutes(doc);
  renderUpstreams(doc);
  renderWatches(doc);
}

async function poll() {
  const err = document.getElementById("error");
  const started = performance.now();
  try {
    // An absolute URL from the origin: a page opened as
    // http://user:token@host/ui/ would resolve a relative one with the
    // credentials in it, which fetch refuses.
    const resp = await fetch(location.origin + "/ui/status.json", { cache: "no-store", credentials: "same-origin" });
    if (!resp.ok) throw new Error("status.json: HTTP " + resp.status);
    render(await resp.json());
    err.hidden = true;
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  } catch (e) {
    err.textContent = "not updating: " + e.message;
    err.hidden = false;
  }
  // A large gateway's document (thousands of upstreams) takes a while to
  // build, fetch and render: polling waits ten times that, so an open page
  // costs the gateway at most a tenth of a core.
  setTimeout(poll, Math.max(POLL_MS, 10 * (performance.now() - started)));
}

poll();
