// crossdock's dashboard: polls GET /v1/overview and draws it. No build step, no library.
// The token comes from the page's #token=… (then kept in this tab's sessionStorage and taken
// out of the address bar), or from the form; on the API's Unix socket none is needed.
"use strict";

const params = new URLSearchParams(location.search);
const INTERVAL_MS = Math.max(250, Number(params.get("interval")) || 2000);
const TOKEN_KEY = "crossdock.token";

(function takeTokenFromHash() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
})();

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return node;
}

function td(text, cls) { return el("td", cls ? { class: cls } : {}, text === null || text === undefined ? "–" : String(text)); }

function fill(tbody, rows, columns, empty) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { class: "empty", colspan: columns }, empty))]));
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.round(seconds);
  if (s < 90) return `${s}s`;
  if (s < 5400) return `${Math.round(s / 60)}m`;
  if (s < 172800) return `${(s / 3600).toFixed(1)}h`;
  return `${(s / 86400).toFixed(1)}d`;
}

function when(epoch) {
  return epoch ? new Date(Number(epoch) * 1000).toLocaleTimeString() : "–";
}

function drawQueues(queues) {
  fill(document.querySelector("#queues tbody"), queues.map(q => el("tr", { dataset: { queue: q.queue } },
    td(q.queue), td(q.priority_class), td(q.pools.join(", ")), td(q.pending, "n"), td(q.held, "n"),
    td(q.running, "n"), td(duration(q.oldest_wait_seconds), "n"), td(duration(q.median_wait_seconds), "n"))),
    8, "no queues");
}

function drawJobs(jobs, now) {
  document.getElementById("jobs-count").textContent = `(${jobs.length} most recent)`;
  fill(document.querySelector("#jobs tbody"), jobs.map(j => {
    const since = Date.parse(j.start_time || j.submit_time || "") / 1000;
    const until = j.end_time ? Date.parse(j.end_time) / 1000 : now;  // a finished job: how long it ran
    const gpus = j.gpu_ids.length ? j.gpu_ids.join(" ") : "–";
    const row = el("tr", { id: `job-${j.display_id}`, dataset: { jobId: j.display_id, state: j.state },
                           title: j.state === "PENDING" ? "why it pends, and what would start it sooner" : null },
      td(j.display_id), td(j.spec.name || (j.spec.command || ["job"])[0]), td(j.spec.user), td(j.queue),
      td(j.pool ? `${j.backend ?? "–"}/${j.pool}` : "–", "pool"),
      el("td", {}, el("span", { class: `state ${j.state}` }, j.state)), reason(j.reason === "None" ? "" : j.reason),
      td(j.nodes.join(",") || "–"), td(gpus), td(isNaN(since) ? "–" : duration(until - since), "n"));
    if (j.state === "PENDING") row.addEventListener("click", () => showWhy(j.id, j.display_id));
    return row;
  }), 10, "no jobs");
}

function headers() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

// GET /v1/jobs/{id}/why: the scheduler's reason, the start it predicts, and each one-edit change
// that starts the job sooner (crossdock why).
async function showWhy(id, shown) {
  const section = document.getElementById("why-section");
  section.hidden = false;
  document.getElementById("why-job").textContent = shown;
  const r = await fetch(`/v1/jobs/${id}/why`, { headers: headers() });
  const w = await r.json();
  if (!r.ok) {
    document.getElementById("why-reason").textContent = w.problems?.[0] ?? `${r.status}`;
    fill(document.querySelector("#why tbody"), [], 4, "");
    return;
  }
  const at = s => s ? new Date(s).toLocaleString() : "not known";
  document.getElementById("why-reason").textContent = w.state === "PENDING" ? w.reason || "no reason recorded yet"
    : `${w.state}, not pending`;
  document.getElementById("why-start").textContent = `expected start as it is: ${at(w.start)}`;
  fill(document.querySelector("#why tbody"), w.options.map(o => el("tr", { dataset: { field: o.field } },
    td(o.change), td(Date.parse(o.start) <= Date.now() ? "now" : at(o.start)),
    td(o.pool ? `${o.pool}${o.nodes.length ? " (" + o.nodes.join(",") + ")" : ""}` : "–"), td(o.apply))),
    4, "no single change to its request starts it sooner");
}

// A long reason (an explanation of why nothing fits) is cut to its cell, whole on hover.
function reason(text) { return el("td", { class: "reason", title: text || null }, el("span", { class: "cut" }, text || "")); }

function drawServices(services) {
  fill(document.querySelector("#services tbody"), services.map(s => el("tr", { dataset: { service: s.name, state: s.state } },
    td(s.name), td(s.user), td(s.queue), el("td", {}, el("span", { class: `state ${s.state}` }, s.state)),
    td(s.ready, "n"), td(s.replicas, "n"), td(s.desired, "n"), td(s.address), reason(s.message))),
    9, "no services");
}

function drawPools(pools) {
  const box = document.getElementById("pools");
  box.replaceChildren(...pools.map(p => {
    const models = Object.entries(p.gpu_models);
    const summary = models.length ? el("table", { class: "models" },
      el("thead", {}, el("tr", {}, ...["GPU model", "total", "used", "free", "largest free block", "fits 1", "fits 2",
        "fits 4", "fits 8"].map((h, i) => el("th", i ? { class: "n" } : {}, h)))),
      el("tbody", {}, models.map(([name, m]) => el("tr", { dataset: { model: name } }, td(name), td(m.total, "n"),
        td(m.used, "n"), td(m.free, "n"), td(m.largest_free_block, "n"),
        ...["1", "2", "4", "8"].map(k => td(m.fits[k], "n")))))) : el("p", { class: "muted" }, "no GPUs");
    const nodes = p.nodes.map(n => el("div", { class: `node${n.schedulable ? "" : " off"}`, dataset: { node: n.name } },
      el("span", { class: "name", title: n.name }, n.name),
      el("span", { class: "bar", title: `CPUs ${n.cpus_used}/${n.cpus}` },
        el("span", { style: `width:${n.cpus ? Math.min(100, 100 * n.cpus_used / n.cpus) : 0}%` })),
      el("span", { class: "muted" }, `${n.cpus_used}/${n.cpus} CPUs`),
      el("span", { class: "gpus" }, n.gpus.map(g => el("span", {
        class: `gpu${g.job === null ? "" : " used"}`, title: `${g.id} ${g.model}${g.job === null ? " free" : ` job ${g.job}`}`,
      })))));
    return el("div", { class: "pool", dataset: { pool: p.pool } },
      el("h3", {}, `${p.pool} `, el("span", { class: "muted" },
        `${p.backend} backend, ${p.nodes.length} node${p.nodes.length === 1 ? "" : "s"}`)), summary, ...nodes);
  }));
  if (!pools.length) box.replaceChildren(el("p", { class: "empty" }, "no nodes known yet (the scheduler has not run)"));
}

function drawDisruptions(rows) {
  fill(document.querySelector("#disruptions tbody"), rows.slice().reverse().map(e => el("tr", {},
    td(when(e.time)), td(e.kind), td(e.job), td(e.from && e.to ? `${e.from} → ${e.to}` : (e.nodes || "")),
    td(e.reason), td(e.actor))), 6, "none recently");
}

function drawAutoscaler(a, events) {
  document.getElementById("autoscaler-at").textContent = a.at ? `last pass ${when(a.at)}` : "no pass yet";
  fill(document.querySelector("#fleets tbody"), a.fleets.map(f => el("tr", {}, td(f.queue),
    td(`${f.backend ?? "–"}/${f.fleet ?? "–"}`), td(f.backlog, "n"), td(f.current, "n"), td(f.desired, "n"),
    td(f.error ? `error: ${f.error}` : f.limited_by))), 6, "no elastic fleet");
  fill(document.querySelector("#scaled-pools tbody"), a.pools.map(p => el("tr", {}, td(p.pool), td(p.ready, "n"),
    td(p.starting, "n"), td(p.desired, "n"), td(p.waiting, "n"), td(p.error ? `error: ${p.error}` : p.limited_by))),
    6, "no provisioned pool");
  fill(document.querySelector("#scaling tbody"), events.slice().reverse().map(e => el("tr", {}, td(when(e.time)),
    td(e.event), td(e.queue || e.pool), td(e.from !== undefined ? `${e.from} → ${e.to}` : e.jobs), td(e.reason))),
    5, "no scaling decision recently");
}

function drawDescheduler(d) {
  const last = d.last_pass;
  const count = (xs) => (xs || []).length;
  const plan = !last ? "no plan yet"
    : `last plan ${when(last.at)}: ${count(last.migrations)} migrations, ${count(last.evicted)} evicted,` +
      ` ${count(last.skipped)} candidates skipped, unblocking ${(last.unblocked || []).join(", ") || "none"}`;
  document.getElementById("descheduler").textContent = !d.enabled
    ? "disabled (descheduler.enabled is off, or this installation has none)"
    : `enabled${d.config.dry_run ? " (dry run)" : ""}, every ${d.config.interval_seconds}s; ${plan}`;
}

function setStatus(text, bad) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.classList.toggle("bad", !!bad);
}

async function poll() {
  try {
    const r = await fetch("/v1/overview", { headers: headers() });
    if (r.status === 401) {
      document.getElementById("login").hidden = false;
      setStatus((await r.json()).problems[0], true);
      return;
    }
    if (!r.ok) throw new Error(`${r.status} ${(await r.json()).problems?.[0] ?? ""}`);
    const o = await r.json();
    document.getElementById("login").hidden = true;
    document.getElementById("who").textContent = `${o.user.name}${o.user.admin ? " (admin)" : ""}`;
    drawQueues(o.queues);
    drawJobs(o.jobs, o.at);
    drawServices(o.services || []);
    drawPools(o.pools);
    drawDisruptions(o.disruptions);
    drawAutoscaler(o.autoscaler, o.scaling_events);
    drawDescheduler(o.descheduler);
    setStatus(`updated ${new Date(o.at * 1000).toLocaleTimeString()}`);
    document.body.dataset.updated = String(o.at);
  } catch (err) {
    setStatus(`cannot reach the API: ${err.message}`, true);
  } finally {
    setTimeout(poll, INTERVAL_MS);
  }
}

document.getElementById("login").addEventListener("submit", ev => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
  document.getElementById("token").value = "";
});

poll();
