// The chat: conversations kept in this browser (localStorage), a model picker, settings, and
// answers streamed from POST v1/chat/completions as they come. Stop aborts the request, which
// the server takes as the call cancelled. Model text is rendered by markdown.js, as text nodes.

import { ApiError, call, events } from "./api.js";
import { el, render } from "./markdown.js";

const STORE = "agent-as-model.conversations";
const SETTINGS = "agent-as-model.settings";
const MAX_IMAGE = 8 * 1024 * 1024;

const $ = (id) => document.getElementById(id);
const state = { conversations: [], current: null, models: [], running: null, images: [] };

export function status(text) {
  $("status").textContent = text;
}

function load(key, fallback) {
  try {
    return JSON.parse(localStorage.getItem(key)) ?? fallback;
  } catch {
    return fallback;
  }
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(state.conversations));
  } catch (e) {
    status(`This browser would not keep the conversation (${e.name}): delete some, or attach smaller images.`);
  }
}

function current() {
  return state.conversations.find((c) => c.id === state.current);
}

function newConversation() {
  const id = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
  const c = { id, title: "New chat", model: $("model").value, messages: [] };
  state.conversations.unshift(c);
  state.current = c.id;
  save();
  showAll();
  $("prompt").focus();
}

// ---- the conversation list -------------------------------------------------------------

function listItem(c) {
  const li = el("li");
  li.classList.toggle("current", c.id === state.current);
  const open = el("button", "title", c.title);
  open.type = "button";
  if (c.id === state.current) open.setAttribute("aria-current", "true");
  open.addEventListener("click", () => {
    state.current = c.id;
    if (c.model) $("model").value = c.model;
    showAll();
  });
  const rename = el("button", "quiet", "✎");
  rename.type = "button";
  rename.title = "Rename";
  rename.setAttribute("aria-label", `Rename ${c.title}`);
  rename.addEventListener("click", () => renaming(li, c));
  const remove = el("button", "quiet", "✕");
  remove.type = "button";
  remove.title = "Delete";
  remove.setAttribute("aria-label", `Delete ${c.title}`);
  remove.addEventListener("click", () => {
    state.conversations = state.conversations.filter((x) => x.id !== c.id);
    if (state.current === c.id) state.current = state.conversations[0]?.id ?? null;
    save();
    showAll();
  });
  li.append(open, rename, remove);
  return li;
}

function renaming(li, c) {
  const input = el("input");
  input.value = c.title;
  input.setAttribute("aria-label", "New name");
  let finished = false;
  const done = (keepIt) => {
    if (finished) return;
    finished = true;
    if (keepIt && input.value.trim()) c.title = input.value.trim().slice(0, 80);
    save();
    showList();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") done(true);
    if (e.key === "Escape") done(false);
  });
  input.addEventListener("blur", () => done(true));
  li.replaceChildren(input);
  input.focus();
  input.select();
}

function showList() {
  $("conversation-list").replaceChildren(...state.conversations.map(listItem));
}

// ---- messages ---------------------------------------------------------------------------

/** `text` as a code block, indented when it is JSON, else as it came (cut short by a stop). */
function jsonBlock(text) {
  let shown = text;
  try {
    shown = JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    // Not JSON (yet): as it came.
  }
  const pre = el("pre");
  pre.append(el("code", "", shown));
  return pre;
}

function toolCalls(calls) {
  const box = el("div", "tool-calls");
  for (const c of calls) {
    const card = el("div", "tool-call");
    card.append(el("span", "label", "Tool call"), el("code", "", c.name || "(unnamed)"));
    card.append(jsonBlock(c.arguments || ""));
    box.append(card);
  }
  return box;
}

function structured(text) {
  const box = el("div", "structured");
  box.append(el("span", "label", "Structured output"), jsonBlock(text));
  return box;
}

function usage(m) {
  const u = m.usage;
  const parts = [];
  if (u) {
    parts.push(`${u.prompt_tokens} prompt tokens`);
    const cached = u.prompt_tokens_details?.cached_tokens;
    if (cached) parts.push(`${cached} cached`);
    parts.push(`${u.completion_tokens} generated`);
  }
  if (m.seconds) parts.push(`${m.seconds.toFixed(1)} s`);
  if (m.finish && m.finish !== "stop") parts.push(`finish: ${m.finish}`);
  return parts.join(" · ");
}

function messageBody(m) {
  const body = el("div", "body");
  if (m.role === "user") {
    body.append(el("p", "plain", m.content));
    for (const url of m.images || []) {
      const img = el("img", "thumb");
      img.src = url;
      img.alt = "attached image";
      body.append(img);
    }
    return body;
  }
  if (m.reasoning) {
    const details = el("details", "reasoning");
    details.append(el("summary", "", "Reasoning"));
    details.append(render(m.reasoning));
    body.append(details);
  }
  if (m.content) body.append(m.structured ? structured(m.content) : render(m.content));
  if (m.toolCalls?.length) body.append(toolCalls(m.toolCalls));
  if (m.pending && !m.content && !m.toolCalls?.length) body.append(el("p", "waiting", "…"));
  if (m.stopped) body.append(el("p", "note stopped", "Stopped."));
  if (m.error) {
    const p = el("p", "error", m.error);
    p.setAttribute("role", "alert");
    body.append(p);
  }
  const info = usage(m);
  if (info) body.append(el("p", "note usage", info));
  return body;
}

function messageItem(m) {
  const li = el("li", `message ${m.role}`);
  const who = m.role === "user" ? "You" : m.model || "Model";
  li.append(el("div", "who", who), messageBody(m));
  return li;
}

function showMessages() {
  const c = current();
  const list = $("messages");
  list.replaceChildren(...(c ? c.messages.map(messageItem) : []));
  list.scrollTop = list.scrollHeight;
}

/** The last message shown again (while it streams), at most once a frame. */
let framed = false;
function showLast() {
  if (framed) return;
  framed = true;
  requestAnimationFrame(() => {
    framed = false;
    const c = current();
    const list = $("messages");
    const m = c?.messages[c.messages.length - 1];
    if (!m || !list.lastElementChild) return;
    const near = list.scrollHeight - list.scrollTop - list.clientHeight < 80;
    // Reasoning a reader unfolded stays unfolded as the answer grows.
    const unfolded = list.lastElementChild.querySelector("details.reasoning")?.open;
    const item = messageItem(m);
    if (unfolded) item.querySelector("details.reasoning").open = true;
    list.lastElementChild.replaceWith(item);
    if (near) list.scrollTop = list.scrollHeight;
  });
}

function showAll() {
  if (!current() && state.conversations.length) state.current = state.conversations[0].id;
  showList();
  showMessages();
  showCapabilities();
}

// ---- models -------------------------------------------------------------------------------

function modelOf(name) {
  return state.models.find((m) => m.id === name || m.aliases.includes(name));
}

function badges(m) {
  const c = m.capabilities;
  const out = [];
  if (!c.chat) return ["embeddings only"];
  if (c.tools) out.push("tools");
  if (c.reasoning) out.push("reasoning");
  if (c.vision) out.push("vision");
  if (c.structured_output) out.push("structured output");
  if (c.embeddings) out.push("embeddings");
  return out;
}

function showCapabilities() {
  const m = modelOf($("model").value);
  const box = $("capabilities");
  box.replaceChildren(...(m ? [m.backend, ...badges(m)] : []).map((b) => el("span", "badge", b)));
  const vision = Boolean(m?.capabilities.vision);
  $("image").disabled = !vision;
  $("attach-label").classList.toggle("disabled", !vision);
  $("attach-label").title = vision ? "" : "This model takes no images";
  if (!vision && state.images.length) {
    state.images = [];
    showAttached();
  }
  $("send").disabled = Boolean(state.running) || (m ? !m.capabilities.chat : false);
}

/** The models a call may name, from the engine view's numbers. */
export function setModels(models) {
  const picker = $("model");
  const chosen = picker.value || current()?.model;
  const same = JSON.stringify(models.map((m) => [m.id, m.aliases, badges(m)])) ===
    JSON.stringify(state.models.map((m) => [m.id, m.aliases, badges(m)]));
  state.models = models;
  if (same && picker.options.length) return;
  const options = [];
  for (const m of models) {
    const extra = badges(m).join(", ");
    options.push(new Option(`${m.id} (${m.backend}${extra ? `: ${extra}` : ""})`, m.id));
    for (const alias of m.aliases) options.push(new Option(`${alias} → ${m.id}`, alias));
  }
  picker.replaceChildren(...options);
  const fallback = models.find((m) => m.default && m.capabilities.chat) ?? models.find((m) => m.capabilities.chat);
  picker.value = chosen && modelOf(chosen) ? chosen : fallback?.id ?? "";
  showCapabilities();
}

// ---- settings -----------------------------------------------------------------------------

const FIELDS = ["system", "temperature", "max-tokens", "tools", "schema"];

function keepSettings() {
  const values = Object.fromEntries(FIELDS.map((f) => [f, $(f).value]));
  try {
    localStorage.setItem(SETTINGS, JSON.stringify(values));
  } catch {
    // Kept for this page's life only.
  }
}

/** The request's settings, or an Error naming the field at fault. */
function settings() {
  const out = {};
  const number = (id, name, whole) => {
    const raw = $(id).value.trim();
    if (!raw) return;
    const n = Number(raw);
    if (!Number.isFinite(n) || n < 0 || (whole && !Number.isInteger(n))) {
      throw new Error(`${name}: "${raw}" is not a ${whole ? "whole " : ""}number of 0 or more`);
    }
    out[name] = n;
  };
  number("temperature", "temperature", false);
  number("max-tokens", "max_tokens", true);
  const json = (id, name) => {
    const raw = $(id).value.trim();
    if (!raw) return undefined;
    try {
      return JSON.parse(raw);
    } catch (e) {
      throw new Error(`${name}: not JSON (${e.message})`);
    }
  };
  const tools = json("tools", "Tools");
  if (tools !== undefined) {
    if (!Array.isArray(tools)) throw new Error("Tools: a JSON array of tools, as OpenAI's chat API takes them");
    out.tools = tools;
  }
  const schema = json("schema", "Structured output");
  if (schema !== undefined) {
    out.response_format = { type: "json_schema", json_schema: { name: "answer", schema } };
  }
  return out;
}

// ---- images -------------------------------------------------------------------------------

function showAttached() {
  const box = $("attached");
  box.replaceChildren(
    ...state.images.map((url, i) => {
      const b = el("button", "badge", `image ${i + 1} ✕`);
      b.type = "button";
      b.setAttribute("aria-label", `Remove image ${i + 1}`);
      b.addEventListener("click", () => {
        state.images.splice(i, 1);
        showAttached();
      });
      return b;
    }),
  );
}

function attach(files) {
  for (const file of files) {
    if (file.size > MAX_IMAGE) {
      status(`${file.name} is over 8 MB: not attached.`);
      continue;
    }
    const reader = new FileReader();
    reader.addEventListener("load", () => {
      state.images.push(reader.result);
      showAttached();
    });
    reader.readAsDataURL(file);
  }
}

// ---- sending ------------------------------------------------------------------------------

/** The conversation as chat completions' messages. */
function wire(messages, system) {
  const out = system.trim() ? [{ role: "system", content: system }] : [];
  for (const m of messages) {
    if (m.role === "user") {
      const images = (m.images || []).map((url) => ({ type: "image_url", image_url: { url } }));
      out.push({ role: "user", content: images.length ? [{ type: "text", text: m.content }, ...images] : m.content });
    } else if (!m.error || m.content) {
      const calls = (m.toolCalls || []).map((c) => `[called ${c.name} with ${c.arguments}]`);
      const text = [m.content || "", ...calls].filter(Boolean).join("\n\n");
      if (text) out.push({ role: "assistant", content: text });
    }
  }
  return out;
}

/** One chunk of the stream folded into the answer `m`. */
function fold(m, chunk) {
  if (chunk.error) {
    m.error = chunk.error.message || JSON.stringify(chunk.error);
    return;
  }
  if (chunk.usage) m.usage = chunk.usage;
  const choice = chunk.choices?.[0];
  if (!choice) return;
  const delta = choice.delta || {};
  if (delta.reasoning_content) m.reasoning = (m.reasoning || "") + delta.reasoning_content;
  if (delta.content) m.content = (m.content || "") + delta.content;
  for (const t of delta.tool_calls || []) {
    m.toolCalls = m.toolCalls || [];
    const at = t.index ?? m.toolCalls.length;
    const c = (m.toolCalls[at] = m.toolCalls[at] || { name: "", arguments: "" });
    if (t.function?.name) c.name = t.function.name;
    if (t.function?.arguments) c.arguments += t.function.arguments;
  }
  if (choice.finish_reason) m.finish = choice.finish_reason;
}

function running(on) {
  $("stop").hidden = !on;
  $("send").hidden = on;
  showCapabilities();
}

async function send(event) {
  event?.preventDefault();
  if (state.running) return;
  const text = $("prompt").value.trim();
  if (!text) return;
  const model = $("model").value;
  if (modelOf(model) && !modelOf(model).capabilities.chat) {
    status(`${model} makes embeddings only: pick a chat model.`);
    return;
  }
  let extra;
  try {
    extra = settings();
  } catch (e) {
    status(e.message);
    return;
  }
  if (!current()) newConversation();
  const c = current();
  c.model = model;
  if (c.title === "New chat") c.title = text.slice(0, 40);
  c.messages.push({ role: "user", content: text, images: state.images });
  const m = { role: "assistant", model, content: "", pending: true, structured: Boolean(extra.response_format) };
  const body = { model, messages: wire(c.messages, $("system").value), stream: true, stream_options: { include_usage: true }, ...extra };
  c.messages.push(m);
  state.images = [];
  showAttached();
  $("prompt").value = "";
  save();
  showAll();
  await answer(m, body);
}

async function answer(m, body) {
  const abort = new AbortController();
  state.running = abort;
  running(true);
  status(`Asking ${m.model}…`);
  const started = performance.now();
  try {
    const response = await call("v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: abort.signal,
    });
    await events(response, (chunk) => {
      fold(m, chunk);
      showLast();
    });
    status(m.error ? "The answer ended with an error." : "Answered.");
  } catch (e) {
    if (abort.signal.aborted) {
      m.stopped = true;
      status("Stopped: the server cancelled the call.");
    } else {
      m.error = e instanceof ApiError ? e.message : `The request failed: ${e.message}`;
      status("The call failed.");
    }
  } finally {
    m.pending = false;
    m.seconds = (performance.now() - started) / 1000;
    state.running = null;
    save();
    showAll();
    running(false);
    $("prompt").focus();
  }
}

function stop() {
  state.running?.abort();
}

// ---- start --------------------------------------------------------------------------------

export function start() {
  state.conversations = load(STORE, []).filter((c) => c && Array.isArray(c.messages));
  state.current = state.conversations[0]?.id ?? null;
  const kept = load(SETTINGS, {});
  for (const f of FIELDS) {
    if (typeof kept[f] === "string") $(f).value = kept[f];
    $(f).addEventListener("change", keepSettings);
  }
  $("composer").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) send(e);
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && state.running) stop();
  });
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", newConversation);
  $("model").addEventListener("change", () => {
    const c = current();
    if (c) {
      c.model = $("model").value;
      save();
    }
    showCapabilities();
  });
  $("image").addEventListener("change", (e) => {
    attach(e.target.files);
    e.target.value = "";
  });
  showAll();
}
