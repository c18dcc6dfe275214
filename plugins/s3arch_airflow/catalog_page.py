"""The catalog page (docs/CATALOG.md): one self-contained HTML document, no build step and
nothing fetched from elsewhere. It reads the catalog's JSON API and acts through Airflow's
public REST API, both same-origin with the logged-in user's cookie."""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Archive catalog</title>
<style>
:root { --bg:#fff; --fg:#1a202c; --muted:#5f6b7a; --line:#d9dee5; --panel:#f6f8fa; --accent:#2563eb;
  --archived:#16a34a; --segments:#0d9488; --sources_deleted:#65a30d; --missing:#f59e0b; --incomplete:#ea580c; --lost:#7f1d1d;
  --running:#3b82f6; --failed:#dc2626; --empty:#e5e7eb; --pending:#f3f4f6; --before_start:#fafafa; --future:transparent; }
html.dark { --bg:#111418; --fg:#e6e9ee; --muted:#9aa4b2; --line:#2d333b; --panel:#1a1f26; --accent:#60a5fa;
  --empty:#2a2f37; --pending:#20252c; --before_start:#171b20; }
* { box-sizing:border-box; }
body { margin:0; padding:16px 20px; font:14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; background:var(--bg); color:var(--fg); }
h1 { font-size:20px; margin:0 0 4px; } h2 { font-size:16px; margin:18px 0 6px; }
.muted { color:var(--muted); } a { color:var(--accent); }
.bar { display:flex; flex-wrap:wrap; gap:10px; align-items:center; margin:8px 0; }
select, button, input { font:inherit; color:var(--fg); background:var(--panel); border:1px solid var(--line); border-radius:6px; padding:4px 10px; }
button:not(:disabled) { cursor:pointer; } button:disabled { opacity:.45; cursor:not-allowed; }
button.primary:not(:disabled) { background:var(--accent); color:#fff; border-color:var(--accent); }
.totals { display:flex; flex-wrap:wrap; gap:8px 22px; background:var(--panel); border:1px solid var(--line); border-radius:8px; padding:10px 14px; }
.totals b { display:block; font-size:18px; }
.legend { display:flex; flex-wrap:wrap; gap:6px 14px; font-size:12px; margin:10px 0; }
.legend span { display:inline-flex; gap:5px; align-items:center; }
.sw { width:12px; height:12px; border-radius:3px; display:inline-block; border:1px solid var(--line); }
.layout { display:flex; gap:18px; align-items:flex-start; }
.years { flex:1; overflow:auto; max-height:calc(100vh - 250px); min-width:0; }
.year { margin-bottom:14px; }
.grid { display:grid; grid-template-columns:34px repeat(31, 16px); gap:3px; align-items:center; }
.grid .m { font-size:11px; color:var(--muted); }
.grid .h { font-size:9px; color:var(--muted); text-align:center; }
.cell { width:16px; height:16px; padding:0; border-radius:3px; border:1px solid transparent; position:relative; }
.cell:focus-visible { outline:2px solid var(--accent); outline-offset:1px; }
.cell.sel { box-shadow:0 0 0 2px var(--fg); }
.cell.drift { border-color:var(--failed); border-width:2px; }
.cell.lock::after { content:""; position:absolute; right:1px; top:1px; width:4px; height:4px; border-radius:50%; background:var(--fg); opacity:.7; }
.cell.inv::after { content:""; position:absolute; left:1px; top:1px; width:4px; height:4px; border-radius:50%; background:var(--accent); }
.cell.restored::before { content:""; position:absolute; left:1px; bottom:1px; width:4px; height:4px; background:#a855f7; }
.none { visibility:hidden; }
""" + "".join(f".s-{s} {{ background:var(--{s}); }}\n" for s in (
    "archived", "segments", "sources_deleted", "missing", "incomplete", "lost", "running", "failed", "empty", "pending",
    "before_start", "future")) + r"""
.side { width:360px; flex:none; position:sticky; top:0; }
.panel { background:var(--panel); border:1px solid var(--line); border-radius:8px; padding:12px 14px; margin-bottom:12px; }
.panel dl { display:grid; grid-template-columns:auto 1fr; gap:3px 10px; margin:6px 0 0; font-size:13px; }
.panel dt { color:var(--muted); } .panel dd { margin:0; word-break:break-all; }
.form { display:grid; grid-template-columns:auto 1fr; gap:6px 8px; align-items:center; margin:8px 0; font-size:13px; }
.runs li { margin:4px 0; font-size:13px; }
.state-success { color:var(--archived); font-weight:600; } .state-failed { color:var(--failed); font-weight:600; }
.error { color:var(--failed); white-space:pre-wrap; }
</style>
</head>
<body>
<h1>Archive catalog</h1>
<div class="bar">
  <label>Job <select id="job" aria-label="Archive job"></select></label>
  <span id="asof" class="muted"></span>
  <button id="refresh" title="Read S3 again (r)">Refresh</button>
  <span id="status" class="muted" role="status" aria-live="polite"></span>
</div>
<div id="totals" class="totals" aria-label="Job totals"></div>
<ul id="backfills" class="runs" aria-label="Backfills"></ul>
<div id="legend" class="legend"></div>
<div class="layout">
  <div id="years" class="years" aria-label="Days by year"></div>
  <div class="side">
    <div class="panel" id="detail" aria-live="polite"><span class="muted">Hover or select a day (arrow keys move, Enter selects, Shift extends).</span></div>
    <div class="panel" id="actions">
      <div><b>Actions</b> <span id="selinfo" class="muted"></span></div>
      <div class="bar">
        <button id="archive" class="primary">Archive selected</button>
        <button id="dryrun">Dry run</button>
      </div>
      <div class="form">
        <label for="tier">Tier</label><select id="tier"><option>Standard</option><option>Bulk</option><option>Expedited</option></select>
        <label for="rdays">Days restored</label><input id="rdays" type="number" min="1" max="365" value="7">
        <label for="target">Target</label><input id="target" placeholder="s3://bucket/prefix/ (empty: where it was)">
        <label for="glob">Glob</label><input id="glob" placeholder="e.g. */app-*.log (empty: all)">
      </div>
      <button id="restore">Restore this day</button>
      <div id="perm" class="muted" style="margin-top:6px"></div>
      <ul id="runs" class="runs"></ul>
    </div>
    <div class="panel" id="inventory" hidden></div>
  </div>
</div>
<script>
"use strict";
const STATES = {archived:"Archived and verified", segments:"Archived as segments", sources_deleted:"Archived, sources deleted",
  missing:"Missing (source has data)", incomplete:"Incomplete (archive without manifest)",
  lost:"Lost (a scrub saw it archived; all gone now)", running:"Running", failed:"Failed (last run)",
  empty:"Empty", pending:"Too recent", before_start:"Before the job's start", future:"Future"};
// Days a selection's "Archive" leaves out: archived already, too recent, before the start, or
// empty (a run of an empty prefix fails: "holds no objects").
const NOT_ARCHIVABLE = ["archived", "segments", "sources_deleted", "pending", "before_start", "empty"];
const MONTHS = ["Jan","Feb","Mar","Apr","May","Jun","Jul","Aug","Sep","Oct","Nov","Dec"];
let path = location.pathname; if (!path.endsWith("/")) path += "/";
const BASE = path, ROOT = path.replace(/s3arch-catalog\/$/, "");
const $ = (id) => document.getElementById(id);
let data = null, jobs = [], job = null, focus = null, anchor = null, selected = [];

// Dark mode: follow the Airflow UI around us (same origin), else the system's preference.
function applyTheme() {
  let dark = matchMedia("(prefers-color-scheme: dark)").matches;
  try {
    const top = window.parent !== window ? window.parent.document.documentElement : null;
    if (top) dark = top.classList.contains("dark") || top.style.colorScheme === "dark" || (top.dataset.theme === "dark");
  } catch (e) {}
  document.documentElement.classList.toggle("dark", dark);
}
applyTheme();
try { if (window.parent !== window) new MutationObserver(applyTheme).observe(window.parent.document.documentElement, {attributes:true}); } catch (e) {}
matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);

const fmtBytes = (n) => { if (n == null) return "–"; const u = ["B","KiB","MiB","GiB","TiB"]; let i = 0; while (n >= 1024 && i < 4) { n /= 1024; i++; } return (i ? n.toFixed(1) : n) + " " + u[i]; };
const usd = (x) => x == null ? "–" : (x >= 0.01 || x === 0 ? "$" + x.toFixed(2) : "$" + x.toPrecision(2));
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));

async function api(url, options) {
  const r = await fetch(url, {credentials:"same-origin", ...(options || {}), headers:{"Content-Type":"application/json", ...((options||{}).headers||{})}});
  const text = await r.text(); let body; try { body = JSON.parse(text); } catch (e) { body = text; }
  if (!r.ok) { const e = new Error((body && body.detail ? (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail)) : text) || r.statusText); e.status = r.status; throw e; }
  return body;
}

async function init() {
  $("legend").innerHTML = Object.entries(STATES).filter(([s]) => s !== "future").map(([s, t]) => `<span><i class="sw s-${s}"></i>${t}</span>`).join("")
    + `<span><i class="sw" style="border:2px solid var(--failed)"></i>Scrub found drift</span><span>● locked</span><span><i class="sw" style="background:#a855f7"></i>restored copy</span>`
    + `<span><span style="color:var(--accent)">●</span> in the inventory, not archived</span>`;
  // In a DAG's Catalog tab the server says which job that DAG is (archive, restore or scrub DAG), or none.
  const wanted = new URLSearchParams(location.search).get("dag_id");
  let listing;
  try { listing = await api(BASE + "api/jobs" + (wanted ? "?dag_id=" + encodeURIComponent(wanted) : "")); }
  catch (e) { $("status").innerHTML = `<span class="error">${esc(e.message)}</span>`; return; }
  jobs = listing.jobs;
  $("job").innerHTML = jobs.map((j) => `<option value="${esc(j.name)}">${esc(j.name)}</option>`).join("");
  $("job").onchange = () => load(false);
  $("refresh").onclick = () => { if (job) load(true); };
  $("archive").onclick = () => trigger(false);
  $("dryrun").onclick = () => trigger(true);
  $("restore").onclick = restore;
  document.addEventListener("keydown", (ev) => { if (job && ev.key === "r" && !/INPUT|SELECT/.test(ev.target.tagName)) load(true); });
  const pick = wanted ? jobs.find((j) => j.name === listing.selected) : jobs[0];
  if (!pick) {  // another DAG's tab: say so, rather than show the first job as if it were this DAG's
    $("years").innerHTML = wanted ? `<p id="not-ours">${esc(wanted)} is not an archive job's DAG; choose a job above.</p>` : "<p>No archive jobs you may read.</p>";
    $("job").insertAdjacentHTML("afterbegin", `<option value="" selected disabled>choose a job</option>`);
    ["archive", "dryrun", "restore"].forEach((id) => { $(id).disabled = true; });
    return;
  }
  $("job").value = pick.name;
  await load(false);
}

async function load(refresh) {
  job = jobs.find((j) => j.name === $("job").value);
  $("status").textContent = refresh ? "Reading S3…" : "Loading…";
  const t0 = performance.now();
  try {
    data = await api(`${BASE}api/dags/${encodeURIComponent(job.dag_id)}/days${refresh ? "?refresh=true" : ""}`);
  } catch (e) { $("status").innerHTML = `<span class="error">${esc(e.message)}</span>`; return; }
  job = data.job_info;
  render();
  $("asof").textContent = `as of ${data.as_of.replace("T", " ").replace("+00:00", " UTC")}`;
  $("status").textContent = `${data.days.length} days, ${Object.entries(data.requests).map(([k, v]) => `${v} ${k}`).join(", ")} (${data.seconds}s), shown in ${Math.round(performance.now() - t0)} ms`;
  document.body.dataset.loaded = "true";
}

// A long backfill's progress: days archived (as S3 shows them) of the days it plans.
function renderBackfills() {
  $("backfills").innerHTML = (data.backfills || []).map((b) => {
    const runs = Object.entries(b.runs).map(([s, n]) => `${n} ${s}`).join(", ");
    const state = b.completed_at ? "finished" : b.paused ? "paused" : "active";
    const outside = b.outside_view ? `, ${b.outside_view} outside the shown range` : "";
    return `<li>Backfill ${b.id} (${state}), logical dates ${b.from_date} to ${b.to_date}: ` +
      `<b>${b.archived} of ${b.days} days archived</b>${outside}; runs: ${esc(runs)}</li>`;
  }).join("");
}

function render() {
  renderBackfills();
  const t = data.totals;
  $("totals").innerHTML = [
    ["Days archived", `${t.archived} of ${t.days}`], ["Objects", t.objects.toLocaleString()],
    ["Bytes in → out", `${fmtBytes(t.bytes_in)} → ${fmtBytes(t.bytes_out)}`],
    ["Per month", `${usd(t.archive_monthly_usd)} vs ${usd(t.separate_monthly_usd)}`],
    ["Monthly saving", usd(t.monthly_saving_usd)], ["Oldest / newest", `${t.oldest || "–"} / ${t.newest || "–"}`],
    ["Gaps", t.gaps.length], ["Drift", t.drift.length]].map(([k, v]) => `<div><span class="muted">${k}</span><b>${esc(v)}</b></div>`).join("");
  const byDay = new Map(data.days.map((d) => [d.day, d]));
  const years = [...new Set(data.days.map((d) => d.day.slice(0, 4)))].sort().reverse();
  const html = [];
  for (const y of years) {
    html.push(`<section class="year" aria-label="${y}"><h2>${y}</h2><div class="grid" role="grid"><span></span>`);
    for (let dn = 1; dn <= 31; dn++) html.push(`<span class="h">${dn % 5 === 1 ? dn : ""}</span>`);
    for (let m = 0; m < 12; m++) {
      html.push(`<span class="m">${MONTHS[m]}</span>`);
      for (let dn = 1; dn <= 31; dn++) {
        const iso = `${y}-${String(m + 1).padStart(2, "0")}-${String(dn).padStart(2, "0")}`;
        const d = byDay.get(iso);
        const real = new Date(Date.UTC(+y, m, dn)).getUTCMonth() === m;
        if (!real) { html.push(`<span class="cell none"></span>`); continue; }
        const state = d ? d.state : "future";
        const cls = ["cell", "s-" + state, d && d.scrub && d.scrub.drift ? "drift" : "", d && d.locked_until ? "lock" : "", d && d.restored_until ? "restored" : "", d && d.inventory ? "inv" : ""].join(" ");
        html.push(`<button class="${cls}" data-day="${iso}" tabindex="-1" aria-label="${iso}: ${STATES[state]}" title="${iso}: ${STATES[state]}"${d ? "" : " disabled"}></button>`);
      }
    }
    html.push(`</div></section>`);
  }
  $("years").innerHTML = html.join("");
  const cells = $("years").querySelectorAll("button.cell");
  cells.forEach((c) => {
    c.addEventListener("mouseenter", () => showDay(c.dataset.day));
    c.addEventListener("focus", () => { focus = c.dataset.day; showDay(focus); });
    c.addEventListener("click", (ev) => choose(c.dataset.day, ev.shiftKey));
    c.addEventListener("keydown", keys);
  });
  const first = (focus && $("years").querySelector(`[data-day="${focus}"]`)) || [...cells].filter((c) => !c.disabled).pop();
  if (first) first.tabIndex = 0;
  markSelection();
  renderInventory();
}

// The job's S3 Inventory report: the days it holds objects of that are not archived, in the
// calendar's range or not (a backfill's to-do list), or why it could not be read.
function renderInventory() {
  const inv = data.inventory, box = $("inventory");
  box.hidden = !inv;
  if (!inv) return;
  if (inv.problem) { box.innerHTML = `<b>Inventory</b><div class="error">${esc(inv.problem)}</div>`; return; }
  const days = inv.unarchived, objects = days.reduce((n, d) => n + d.objects, 0);
  const rows = days.map((d) => `<li data-inventory-day="${d.day}">${d.day}: ${d.objects.toLocaleString()} objects, ${fmtBytes(d.bytes)}</li>`);
  box.innerHTML = `<b>Inventory</b> <span class="muted">report of ${esc(inv.created.replace("T", " "))}</span>`
    + `<div id="inventory-summary">${days.length} day(s) not archived, ${objects.toLocaleString()} objects</div>`
    + `<ul class="runs" style="max-height:160px; overflow:auto">${rows.join("")}</ul>`;
}

function keys(ev) {
  const day = ev.target.dataset.day; const d = new Date(day + "T00:00:00Z");
  const moves = {ArrowLeft:[0, -1], ArrowRight:[0, 1], ArrowUp:[-1, 0], ArrowDown:[1, 0]};
  if (moves[ev.key]) {
    ev.preventDefault();
    const [dm, dd] = moves[ev.key];
    if (dm) d.setUTCMonth(d.getUTCMonth() + dm); else d.setUTCDate(d.getUTCDate() + dd);
    const next = $("years").querySelector(`[data-day="${d.toISOString().slice(0, 10)}"]:not(:disabled)`);
    if (next) { ev.target.tabIndex = -1; next.tabIndex = 0; next.focus(); if (ev.shiftKey) choose(next.dataset.day, true); }
  } else if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); choose(day, ev.shiftKey); }
  else if (ev.key === "Escape") { selected = []; anchor = null; markSelection(); }
}

function choose(day, extend) {
  if (extend && anchor) {
    const [a, b] = [anchor, day].sort();
    selected = data.days.filter((d) => d.day >= a && d.day <= b).map((d) => d.day);
  } else { anchor = day; selected = [day]; }
  showDay(day); markSelection();
}

function markSelection() {
  $("years").querySelectorAll("button.cell.sel").forEach((c) => c.classList.remove("sel"));
  for (const day of selected) { const c = $("years").querySelector(`[data-day="${day}"]`); if (c) c.classList.add("sel"); }
  const byDay = new Map(data.days.map((d) => [d.day, d]));
  const days = selected.map((d) => byDay.get(d)).filter(Boolean);
  const archivable = days.filter((d) => !NOT_ARCHIVABLE.includes(d.state));
  const one = days.length === 1 ? days[0] : null;
  $("selinfo").textContent = days.length ? (days.length === 1 ? days[0].day : `${days[0].day} … ${days[days.length - 1].day} (${days.length} days, ${archivable.length} to archive)`) : "(select days)";
  const canT = job && job.can_trigger, canR = job && job.can_restore;
  $("archive").disabled = !canT || !archivable.length;
  $("dryrun").disabled = !canT || !archivable.length;
  $("restore").disabled = !canR || !one || !["archived", "segments", "sources_deleted"].includes(one.state);
  $("perm").textContent = canT && canR ? "" : `You may read this job, but not trigger its DAGs: the buttons are off.`;
}

function showDay(day) {
  const d = data.days.find((x) => x.day === day); if (!d) return;
  const rows = [["State", STATES[d.state]], ["Prefix", d.prefix]];
  if (d.objects != null) rows.push(["Objects", d.objects.toLocaleString()], ["Bytes in → out", `${fmtBytes(d.bytes_in)} → ${fmtBytes(d.bytes_out)}`], ["Ratio", d.ratio ? d.ratio + "×" : "–"],
    ["$/month", `${usd(d.archive_monthly_usd)} as one archive vs ${usd(d.separate_monthly_usd)} as ${d.objects.toLocaleString()} objects`], ["Class", d.storage_class || "–"], ["Archived", d.archived_at || "–"]);
  if (d.archive_url) rows.push(["Archive", d.archive_url]);
  if (d.parts) rows.push(["Parts", `${d.parts} (late objects were archived as later parts)`]);
  if (d.splits) rows.push(["Archives", d.splits.map((s) => `${s.prefix}: ${STATES[s.state]}${s.parts ? `, ${s.parts} parts` : ""}${s.late ? `, ${s.late}` : ""}`).join("; ")]);
  if (d.late) rows.push(["Newer than archive", `${d.late}: re-run the day to archive them as its next part`]);
  if (d.locked_until) rows.push(["Locked until", d.locked_until]);
  if (d.restored_until) rows.push(["Restored copy until", d.restored_until]);
  if (d.scrub) rows.push(["Last scrub", d.scrub.drift ? d.scrub.drift.map((x) => `${x.kind}: ${x.detail} — ${x.action}`).join("; ") : `verified on ${d.scrub.verified}`]);
  if (d.inventory) rows.push(["Inventory", `${d.inventory.objects.toLocaleString()} objects, ${fmtBytes(d.inventory.bytes)}: not archived`]);
  if (d.problem) rows.push(["Problem", d.problem]);
  if (d.airflow) rows.push(["Last task", `<a href="${ROOT}${d.airflow.url.slice(1)}">${esc(d.airflow.state)} (${esc(d.airflow.run_id)})</a>`]);
  $("detail").innerHTML = `<b>${d.day}</b><dl>${rows.map(([k, v]) => `<dt>${k}</dt><dd>${k === "Last task" ? v : esc(v)}</dd>`).join("")}</dl>`;
}

async function createRun(dagId, conf, what) {
  const li = document.createElement("li"); li.textContent = `${what}: creating…`; $("runs").prepend(li);
  try {
    const run = await api(`${ROOT}api/v2/dags/${encodeURIComponent(dagId)}/dagRuns`, {method:"POST", body:JSON.stringify({logical_date:null, conf})});
    const link = `${ROOT}dags/${encodeURIComponent(dagId)}/runs/${encodeURIComponent(run.dag_run_id)}`;
    const show = (state) => { li.innerHTML = `${esc(what)}: <a href="${link}">${esc(run.dag_run_id)}</a> <span class="state-${esc(state)}" data-run-state="${esc(state)}">${esc(state)}</span>`; };
    show(run.state || "queued");
    for (let i = 0; i < 400; i++) {
      await new Promise((r) => setTimeout(r, 3000));
      const now = await api(`${ROOT}api/v2/dags/${encodeURIComponent(dagId)}/dagRuns/${encodeURIComponent(run.dag_run_id)}`);
      show(now.state);
      if (["success", "failed"].includes(now.state)) { if (dagId === job.dag_id) load(true); break; }
    }
  } catch (e) { li.innerHTML = `${esc(what)}: <span class="error">${e.status === 403 ? "not allowed (403): you may not trigger this DAG" : esc(e.message)}</span>`; }
}

function trigger(dry) {
  const byDay = new Map(data.days.map((d) => [d.day, d]));
  const prefixes = selected.map((d) => byDay.get(d)).filter((d) => d && !NOT_ARCHIVABLE.includes(d.state)).map((d) => d.prefix);
  if (!prefixes.length) return;
  createRun(job.dag_id, {prefixes, dry_run: dry}, `${dry ? "Dry run" : "Archive"} of ${prefixes.length} day(s)`);
}

function restore() {
  const d = data.days.find((x) => x.day === selected[0]); if (!d) return;
  createRun(job.restore_dag_id, {prefixes:[d.prefix], tier:$("tier").value, days:+$("rdays").value,
    target:$("target").value.trim() || null, glob:$("glob").value.trim() || null}, `Restore of ${d.day}`);
}

init();
</script>
</body>
</html>
"""
