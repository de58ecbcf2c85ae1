// Calls to this server's own APIs (relative URLs: the page's origin, behind any proxy prefix),
// with the token when the server asks for one: asked once in a dialog, kept in this browser,
// and sent as the APIs take it (Authorization: Bearer).

const TOKEN = "agent-as-model.token";

let token = read();
let asking = null;

function read() {
  try {
    return localStorage.getItem(TOKEN) || "";
  } catch {
    return "";
  }
}

function keep(value) {
  token = value;
  try {
    if (value) localStorage.setItem(TOKEN, value);
    else localStorage.removeItem(TOKEN);
  } catch {
    // Kept for this page's life only.
  }
  document.getElementById("forget").hidden = !value;
}

/** Forgets the token: the next call asks again. */
export function forget() {
  keep("");
}

/** Asks for the token in the dialog (one dialog however many calls wait); null if cancelled. */
function ask(why) {
  if (asking) return asking;
  const dialog = document.getElementById("auth");
  const form = document.getElementById("auth-form");
  const input = document.getElementById("token");
  document.getElementById("auth-why").textContent = why;
  input.value = "";
  asking = new Promise((resolve) => {
    const done = (value) => {
      form.removeEventListener("submit", submit);
      dialog.removeEventListener("cancel", cancel);
      cancelButton.removeEventListener("click", cancel);
      dialog.close();
      asking = null;
      resolve(value);
    };
    const submit = (event) => {
      event.preventDefault();
      done(input.value.trim() || null);
    };
    const cancel = (event) => {
      event.preventDefault();
      done(null);
    };
    const cancelButton = document.getElementById("auth-cancel");
    form.addEventListener("submit", submit);
    dialog.addEventListener("cancel", cancel);
    cancelButton.addEventListener("click", cancel);
    dialog.showModal();
    input.focus();
  });
  return asking;
}

/** An error a call ended with, its message the API's own. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The message of an API's error body (any of its envelopes), else the status. */
export function messageOf(body, status) {
  const error = body && body.error;
  if (typeof error === "string") return error;
  if (error && typeof error.message === "string") return error.message;
  if (body && typeof body.message === "string") return body.message;
  if (body && typeof body.detail === "string") return body.detail;
  return `the server answered ${status} with no message`;
}

async function failure(response) {
  const text = await response.text().catch(() => "");
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = text.trim() ? { message: text.trim() } : null;
  }
  return new ApiError(response.status, messageOf(body, response.status));
}

/**
 * `fetch` of `path` on this server with the token; a 401 asks for the token and tries again.
 * Resolves to the response when it is a success; rejects with an ApiError otherwise.
 */
export async function call(path, init = {}) {
  for (;;) {
    const headers = new Headers(init.headers || {});
    if (token) headers.set("Authorization", `Bearer ${token}`);
    const response = await fetch(path, { ...init, headers, credentials: "omit" });
    if (response.ok) return response;
    const error = await failure(response);
    if (response.status !== 401) throw error;
    const why = token ? `The token was refused: ${error.message}` : error.message;
    const given = await ask(why);
    if (!given) throw error;
    keep(given);
  }
}

/** A JSON POST to `path`; the parsed answer. */
export async function post(path, body, init = {}) {
  const response = await call(path, {
    ...init,
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  return response.json();
}

/** A GET of `path`, parsed as JSON. */
export async function get(path) {
  const response = await call(path);
  return response.json();
}

/**
 * The `data:` payloads of a server-sent event stream, parsed as JSON, handed to `each` as they
 * come; ends at `[DONE]` or the stream's end.
 */
export async function events(response, each) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let held = "";
  for (;;) {
    const { value, done } = await reader.read();
    held += decoder.decode(value || new Uint8Array(), { stream: !done });
    let end;
    while ((end = held.indexOf("\n")) >= 0) {
      const line = held.slice(0, end).replace(/\r$/, "");
      held = held.slice(end + 1);
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") return;
      if (data) each(JSON.parse(data));
    }
    if (done) return;
  }
}

document.getElementById("forget").hidden = !token;
