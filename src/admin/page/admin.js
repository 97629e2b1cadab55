// The karpenter-rs admin page: reads the endpoint's JSON routes every two seconds and draws
// them. Everything is built with DOM calls and textContent, so no value from the cluster is
// ever read as markup.
"use strict";

const REFRESH_MS = 2000;
const HISTORY = 720; // samples kept for the chart
const history = [];
let refreshes = 0;
let costShown = null; // {round, answer}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}

function fill(id, rows, empty) {
  const body = document.querySelector(`#${id} tbody`);
  const columns = document.querySelectorAll(`#${id} thead th`).length;
  body.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: columns }, empty))]));
}

function facts(id, pairs) {
  const list = document.getElementById(id);
  list.replaceChildren(...pairs.flatMap(([term, value]) => [el("dt", {}, term), el("dd", {}, value)]));
}

async function get(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${(await response.text()).trim()}`);
  return response.json();
}

function time(ms) {
  return ms ? new Date(ms).toISOString().replace(".000Z", "Z").replace("T", " ") : "-";
}

function duration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "-";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${s % 60 ? ` ${s % 60}s` : ""}`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h${m % 60 ? ` ${m % 60}m` : ""}`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

function dollars(value) {
  return `$${value.toFixed(4)}`;
}

function phaseName(phase) {
  if (typeof phase === "string") return phase;
  const [name, detail] = Object.entries(phase || {})[0] || ["?", ""];
  return detail ? `${name}: ${detail}` : name;
}

function quantities(map) {
  return Object.entries(map || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "-";
}

function eventDetail(event) {
  switch (event.type) {
    case "PodPending": return `${event.pod} ${quantities(event.requests)}`;
    case "NodeClaimLaunched": return event.instance ? `${event.instance.instance_type} ${event.instance.zone} ${event.instance.capacity_type} ${dollars(event.instance.price)}/h` : "";
    case "NodeClaimTerminated": case "NodeClaimDraining": return event.reason || "";
    case "RoundCompleted": return `round ${event.round}: ${event.pods} pods, ${event.nodeclaims.length} NodeClaims, ${event.unschedulable.length} unschedulable`;
    case "DisruptionDecided": return `command ${event.command} ${event.method}: ${(event.candidates || []).map((c) => c.nodeclaim).join(", ")}`;
    case "DisruptionProgressed": return `command ${event.command}: ${phaseName(event.phase)}`;
    case "LaunchFailed": return event.reason || "";
    case "NodeClaimRegistered": return event.node || "";
    default: return "";
  }
}

function drawChart() {
  const chart = document.getElementById("chart");
  const [w, h, pad] = [600, 150, 24];
  chart.replaceChildren();
  chart.append(svg("line", { x1: pad, y1: h - pad, x2: w - pad, y2: h - pad, class: "axis" }));
  if (history.length < 2) {
    const text = svg("text", { x: w / 2, y: h / 2, "text-anchor": "middle", class: "note" });
    text.textContent = "collecting samples…";
    chart.append(text);
    return;
  }
  const t0 = history[0].at, t1 = history[history.length - 1].at;
  const span = Math.max(t1 - t0, 1);
  const x = (at) => pad + ((at - t0) / span) * (w - 2 * pad);
  const line = (key, cls) => {
    const top = Math.max(...history.map((s) => s[key]), 1e-9);
    const y = (v) => h - pad - (v / top) * (h - 2 * pad);
    const points = history.map((s) => `${x(s.at).toFixed(1)},${y(s[key]).toFixed(1)}`).join(" ");
    chart.append(svg("polyline", { points, class: `series ${cls}` }));
    const left = key === "nodes";
    const label = svg("text", { x: left ? pad : w - pad, y: y(top) - 4, "text-anchor": left ? "start" : "end", class: `note ${cls}` });
    label.textContent = key === "cost" ? `max ${dollars(top)}/h` : `max ${top} nodes`;
    chart.append(label);
  };
  line("nodes", "nodes");
  line("cost", "cost");
  for (const [at, anchor] of [[t0, "start"], [t1, "end"]]) {
    const label = svg("text", { x: x(at), y: h - 6, "text-anchor": anchor, class: "note" });
    label.textContent = time(at).slice(11);
    chart.append(label);
  }
}

function drawSummary(now, claims, scheduler, disruption) {
  const cost = claims.reduce((sum, c) => sum + (c.instance ? c.instance.price : 0), 0);
  const nodes = claims.filter((c) => c.node).length;
  facts("summary", [
    ["last event at", time(now)],
    ["NodeClaims", claims.length],
    ["nodes", nodes],
    ["$/h", dollars(cost)],
    ["pending pods", scheduler.pending],
    ["rounds", scheduler.rounds],
    ["disruptions in flight", disruption ? disruption.commands.length : "-"],
  ]);
  if (now && (!history.length || history[history.length - 1].at < now)) {
    history.push({ at: now, nodes, cost });
    if (history.length > HISTORY) history.shift();
  }
}

function drawEvents(events) {
  fill("events", events.slice().reverse().map((e) => el("tr", {},
    el("td", { class: "num" }, e.seq),
    el("td", {}, time(e.recorded_at_ms).slice(11)),
    el("td", {}, e.event_type),
    el("td", {}, e.entity),
    el("td", {}, eventDetail(e.event)),
  )), "no events yet");
}

function drawNodePools(pools, disruption) {
  const allowed = (disruption && disruption.last_pass && disruption.last_pass.allowed) || {};
  fill("nodepools", pools.map((p) => {
    const usage = Object.entries(p.limits).map(([k, v]) => `${k} ${p.usage[k] || "0"} / ${v}`);
    for (const [k, v] of Object.entries(p.usage)) if (!(k in p.limits)) usage.push(`${k} ${v}`);
    const budgets = p.disruption.budgets.map((b) => [
      `nodes ${b.nodes}`, b.schedule ? `at "${b.schedule}"` : "", b.duration ? `for ${b.duration}` : "",
      b.reasons && b.reasons.length ? `(${b.reasons.join(", ")})` : "",
    ].filter(Boolean).join(" "));
    const mine = Object.entries(allowed).filter(([k]) => k.startsWith(`${p.name}/`)).map(([k, v]) => `${k.slice(p.name.length + 1)} ${v}`);
    return el("tr", {},
      el("td", {}, p.name),
      el("td", { class: "num" }, p.weight),
      el("td", { class: "num" }, p.nodeclaims.length),
      el("td", {}, usage.join(", ") || "-"),
      el("td", {}, `${p.disruption.consolidationPolicy} after ${p.disruption.consolidateAfter}`),
      el("td", {}, budgets.join("; ") || "-"),
      el("td", {}, mine.join(", ") || "-"),
      el("td", {}, p.registration || "-"),
    );
  }), "no NodePools");
}

function drawOverlays(overlays) {
  const conflicts = new Map();
  for (const [left, applied] of overlays.conflicts) {
    conflicts.set(left, [...(conflicts.get(left) || []), `left out for ${applied}`]);
    conflicts.set(applied, [...(conflicts.get(applied) || []), `applied over ${left}`]);
  }
  const resized = overlays.resized || {};
  const names = [...new Set([...Object.keys(overlays.repriced), ...Object.keys(resized), ...conflicts.keys()])].sort();
  const empty = overlays.enabled ? "no NodeOverlay in force" : "NodeOverlay gate off (FEATURE_GATES=NodeOverlay=true reads them)";
  fill("overlays", names.map((name) => el("tr", { "data-overlay": name },
    el("td", { class: "name" }, name),
    el("td", { class: "num" }, overlays.repriced[name] || 0),
    el("td", { class: "num" }, resized[name] || 0),
    el("td", { class: "wrap" }, (conflicts.get(name) || []).join("; ") || "-"),
  )), empty);
}

function drawNodeClaims(claims, now, disruption) {
  const inFlight = new Map();
  for (const c of (disruption && disruption.commands) || []) {
    for (const m of c.candidates) inFlight.set(m.nodeclaim, `command ${c.id} ${c.method} (${phaseName(c.phase)})`);
    for (const r of c.replacements) inFlight.set(r, `replaces, command ${c.id}`);
  }
  const blocked = (disruption && disruption.last_pass && disruption.last_pass.blocked) || {};
  claims.sort((a, b) => a.name.localeCompare(b.name));
  document.getElementById("nodeclaim-count").textContent = `(${claims.length})`;
  fill("nodeclaims", claims.map((c) => {
    const i = c.instance;
    const why = [c.reason, inFlight.get(c.name), c.facts.drifted ? `drifted: ${c.facts.drifted.reason}` : null,
      c.facts.do_not_disrupt ? "do-not-disrupt" : null, blocked[c.name] ? `blocked: ${blocked[c.name]}` : null].filter(Boolean);
    const conditions = c.conditions.map((cond) => el("span", { class: `chip ${cond.status === "True" ? "ok" : "no"}`, title: cond.message || cond.reason || "" }, cond.type));
    const path = `/explain/nodeclaim/${encodeURIComponent(c.name)}`;
    return el("tr", { "data-nodeclaim": c.name },
      el("td", { class: "name" }, c.name),
      el("td", {}, c.nodepool),
      el("td", {}, el("span", { class: `state ${c.state}` }, c.state)),
      el("td", {}, i ? i.instance_type : "-"),
      el("td", {}, i ? i.zone : "-"),
      el("td", {}, i ? (i.reservation ? `${i.capacity_type} (${i.reservation.id})` : i.capacity_type) : "-"),
      el("td", { class: "num" }, i ? dollars(i.price) : "-"),
      el("td", { class: "num" }, now ? duration(now - c.facts.created_ms) : "-"),
      el("td", { class: "wrap" }, conditions.length ? conditions : "-"),
      // Round 0: a disruption command's replacement, or a NodeClaim taken over.
      el("td", {}, c.round ? `round ${c.round}` : "-"),
      el("td", { class: "wrap" }, why.join("; ") || "-"),
      el("td", { class: "links" },
        el("a", { href: `${path}?format=text`, class: "explain-text" }, "text"), " ",
        el("a", { href: path, class: "explain-json" }, "JSON")),
    );
  }), "no NodeClaims yet");
}

async function drawScheduler(scheduler) {
  const round = scheduler.last_round;
  const pairs = [
    ["rounds", scheduler.rounds],
    ["batch window", scheduler.batching ? "open" : "closed"],
    ["nominated pods", scheduler.nominated],
  ];
  if (round) {
    pairs.push(["last round", `${round.round}: ${round.pods} pods, ${round.bindings.length} bound to existing nodes, ${round.nodeclaims.length} NodeClaims planned, ${round.unschedulable.length} unschedulable, ${(round.duration_us / 1000).toFixed(1)} ms`]);
  }
  const planning = scheduler.last_planning_round;
  if (planning && (!costShown || costShown.round !== planning)) {
    try {
      costShown = { round: planning, answer: await get(`/rounds/${planning}/cost`) };
    } catch (error) {
      costShown = { round: planning, answer: null, error: String(error.message || error) };
    }
  }
  if (costShown) {
    const a = costShown.answer;
    pairs.push([`cost / bound, round ${costShown.round}`, a
      ? `${dollars(a.cost)}/h for ${a.nodeclaims} NodeClaims against a bound of ${dollars(a.bound)}/h: ${a.ratio === null ? "-" : a.ratio.toFixed(3)} (first-fit ${dollars(a.ffd)}/h)`
      : `not available (${costShown.error})`]);
  }
  facts("round", pairs);
  document.getElementById("pending-count").textContent = `(${scheduler.pending})`;
  fill("pending", scheduler.pending_pods.map((p) => el("tr", {},
    el("td", {}, p.pod),
    el("td", {}, quantities(p.requests)),
    el("td", {}, scheduler.unschedulable[p.uid] || (scheduler.batching ? "in the open batch" : "waiting for the next round")),
  )), "no pod is pending");
}

function drawDisruption(disruption) {
  if (!disruption) {
    facts("disruption-facts", [["controller", "not running"]]);
    fill("commands", [], "-");
    fill("blocked", [], "-");
    return;
  }
  const pass = disruption.last_pass;
  const ended = Object.entries(disruption.ended).map(([k, v]) => `${k} ${v}`).join(", ");
  facts("disruption-facts", [
    ["passes", disruption.passes],
    ["last pass", pass ? `${time(pass.at_ms)}: ${pass.nodeclaims} NodeClaims, eligible ${quantities(pass.eligible)}, ${pass.simulations} simulations, ${(pass.duration_us / 1000).toFixed(1)} ms` : "-"],
    ["validating", disruption.validating ? `${disruption.validating[0]}: ${disruption.validating[1].join(", ")}` : "-"],
    ["ended", ended || "-"],
    ["expired", disruption.expired],
    ["rejected at validation", disruption.rejected],
  ]);
  fill("commands", disruption.commands.map((c) => el("tr", {},
    el("td", { class: "num" }, c.id),
    el("td", {}, c.method),
    el("td", {}, phaseName(c.phase)),
    el("td", {}, c.candidates.map((m) => m.nodeclaim).join(", ")),
    el("td", {}, c.replacements.join(", ") || "-"),
  )), "no command in flight");
  fill("blocked", Object.entries((pass && pass.blocked) || {}).map(([name, why]) => el("tr", {}, el("td", {}, name), el("td", {}, why))), "none");
}

function drawActors(names, claims, pools, scheduler, disruption, keeper) {
  const claimState = new Map(claims.map((c) => [c.name, c.state]));
  const poolOf = new Map(claims.map((c) => [c.name, c.nodepool]));
  const poolStatus = new Map(pools.map((p) => [p.name, p]));
  const state = (name) => {
    const [kind, rest] = name.includes("/") ? name.split(/\/(.*)/s) : [name, ""];
    switch (kind) {
      case "nodeclaim": return claimState.get(rest) || "stopping";
      case "nodepool": { const p = poolStatus.get(rest); return p ? `${p.nodeclaims.length} NodeClaims` : ""; }
      case "scheduler": return `${scheduler.pending} pending, round ${scheduler.rounds}`;
      case "disruption": return disruption ? `${disruption.passes} passes, ${disruption.commands.length} in flight` : "";
      case "keeper": return keeper ? `${keeper.snapshots} snapshots, ${keeper.failures} failures` : "";
      default: return "running";
    }
  };
  const item = (name, children) => el("li", { "data-actor": name },
    el("span", { class: "actor" }, name), " ", el("span", { class: "actor-state" }, state(name)),
    children && children.length ? el("ul", {}, children) : null);
  const claimsOf = (pool) => names.filter((n) => n.startsWith("nodeclaim/") && poolOf.get(n.slice(10)) === pool).map((n) => item(n));
  const orphans = names.filter((n) => n.startsWith("nodeclaim/") && !poolStatus.has(poolOf.get(n.slice(10))));
  const top = names.filter((n) => n !== "supervisor" && !n.startsWith("nodeclaim/"))
    .map((n) => item(n, n.startsWith("nodepool/") ? claimsOf(n.slice(9)) : null));
  const root = names.includes("supervisor") ? [item("supervisor", [...top, ...orphans.map((n) => item(n))])] : top;
  document.getElementById("actors").replaceChildren(...root);
}

async function refresh() {
  const [names, pools, claims, scheduler, disruption, keeper, events, overlays] = await Promise.all([
    get("/actors"), get("/nodepools"), get("/nodeclaims"), get("/scheduler"),
    get("/disruption"), get("/keeper"), get("/journal?last=40"), get("/overlays"),
  ]);
  const now = events.length ? events[events.length - 1].recorded_at_ms : null;
  drawSummary(now, claims, scheduler, disruption);
  drawChart();
  drawEvents(events);
  drawNodePools(pools, disruption);
  drawOverlays(overlays);
  drawNodeClaims(claims, now, disruption);
  await drawScheduler(scheduler);
  drawDisruption(disruption);
  drawActors(names, claims, pools, scheduler, disruption, keeper);
}

async function loop() {
  const status = document.getElementById("refreshed");
  const error = document.getElementById("error");
  try {
    await refresh();
    refreshes += 1;
    status.dataset.count = String(refreshes);
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.getElementById("live").className = "dot live";
    error.hidden = true;
  } catch (e) {
    // The endpoint stopped (the run ended) or refused: say so and keep trying.
    document.getElementById("live").className = "dot down";
    error.textContent = `cannot refresh: ${e.message || e}`;
    error.hidden = false;
  }
  setTimeout(loop, REFRESH_MS);
}

loop();
