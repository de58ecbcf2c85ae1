// The engine view: each model with its engine now (loaded or not, device, layers on the GPU,
// context, memory, keep-alive left, queue), load and unload buttons for the embedded models
// (Ollama's API: a generate with no prompt loads, with keep_alive 0 unloads), and charts of
// the last minutes, all from GET ui/engine.json.

import { post } from "./api.js";
import { draw } from "./chart.js";
import { status } from "./chat.js";
import { el } from "./markdown.js";

const $ = (id) => document.getElementById(id);
let last = null;
let refresh = () => {};

function bytes(n) {
  if (n === null || n === undefined || n === 0) return "—";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return `${n.toFixed(i && n < 10 ? 1 : 0)} ${units[i]}`;
}

function duration(secs) {
  if (secs >= 3600) return `${Math.floor(secs / 3600)} h ${Math.floor((secs % 3600) / 60)} min`;
  if (secs >= 60) return `${Math.floor(secs / 60)} min ${secs % 60} s`;
  return `${secs} s`;
}

function state(m) {
  if (!m.engine) return "remote";
  if (m.engine.loaded) return "loaded";
  return m.status || "unloaded";
}

function keepAlive(m) {
  if (!m.engine?.loaded) return "—";
  if (m.keep_alive_secs === null || m.keep_alive_secs === undefined) return "for good";
  return duration(m.keep_alive_left_secs ?? m.keep_alive_secs);
}

async function loadOrUnload(button, m, unload) {
  button.disabled = true;
  button.textContent = unload ? "Unloading…" : "Loading…";
  const body = { model: m.id, stream: false };
  if (unload) body.keep_alive = 0;
  try {
    await post("api/generate", body);
    status(unload ? `${m.id} is unloading.` : `${m.id} is loaded.`);
  } catch (e) {
    status(`${m.id}: ${e.message}`);
  }
  refresh();
}

function actions(m) {
  const cell = el("td");
  if (!m.engine) return cell;
  const unload = m.engine.loaded;
  const button = el("button", "", unload ? "Unload" : "Load");
  button.type = "button";
  button.dataset.model = m.id;
  button.setAttribute("aria-label", `${unload ? "Unload" : "Load"} ${m.id}`);
  button.addEventListener("click", () => loadOrUnload(button, m, unload));
  cell.append(button);
  return cell;
}

function row(m) {
  const tr = el("tr");
  tr.dataset.model = m.id;
  tr.dataset.state = state(m);
  const name = el("th", "", m.id);
  name.scope = "row";
  if (m.aliases.length) name.append(el("span", "aliases", ` (${m.aliases.join(", ")})`));
  const e = m.engine;
  const cells = [
    m.backend,
    state(m),
    m.device ?? "—",
    m.gpu_layers ?? "—",
    m.context_tokens ? `${m.context_tokens} tokens` : "—",
    e?.loaded ? bytes(e.memory_bytes) : "—",
    keepAlive(m),
    e ? `${e.queued} / ${e.busy} of ${e.slots}` : "—",
  ];
  tr.append(name, ...cells.map((c) => el("td", "", String(c))), actions(m));
  tr.children[2].className = `state ${state(m).split(":")[0]}`;
  return tr;
}

const CHARTS = [
  ["chart-speed", "tokens_per_second", (v) => v.toFixed(v < 10 ? 1 : 0)],
  ["chart-first", "first_token_seconds", (v) => v.toFixed(v < 1 ? 2 : 1)],
  ["chart-cached", "cached_share", (v) => `${Math.round(v * 100)}%`],
];

function charts(recent) {
  for (const [id, key, format] of CHARTS) {
    draw($(id), recent.points.map((p) => p[key]), recent.window_secs, format);
  }
}

/** Shows the engine's numbers (when the view is open; the charts are drawn on opening too). */
export function show(data) {
  last = data;
  if ($("engine").hidden) return;
  const q = data.queue;
  $("queue").textContent = `Queue: ${q.waiting} waiting · ${q.busy} of ${q.slots} slots busy · server ${data.version}`;
  const tbody = $("models").tBodies[0];
  const focused = document.activeElement?.dataset?.model;
  tbody.replaceChildren(...data.models.map(row));
  if (focused) tbody.querySelector(`button[data-model="${CSS.escape(focused)}"]`)?.focus();
  charts(data.recent);
}

/** Opens the view: drawn now from the last numbers, and `again` asks for fresh ones. */
export function opened(again) {
  refresh = again;
  if (last) show(last);
  again();
}
