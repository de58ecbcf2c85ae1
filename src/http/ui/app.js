// The page: two views (chat, engine) as tabs, and the engine's numbers read every two seconds
// while the page is visible (the model picker is built from them too).

import { ApiError, forget, get } from "./api.js";
import { setModels, start, status } from "./chat.js";
import { opened, show } from "./engine.js";

const $ = (id) => document.getElementById(id);
const TABS = ["chat", "engine"];
let timer = null;
let reading = false;

/** Reads the numbers now (unless a reading is under way), then every two seconds. */
async function refresh() {
  if (reading) return;
  reading = true;
  clearTimeout(timer);
  try {
    const data = await get("ui/engine.json");
    setModels(data.models);
    show(data);
  } catch (e) {
    status(`The server's numbers could not be read: ${e.message}`);
    // Refused the token: asked again when the page is used, not every two seconds.
    if (e instanceof ApiError && e.status === 401) {
      reading = false;
      return;
    }
  }
  reading = false;
  if (!document.hidden) timer = setTimeout(refresh, 2000);
}

function select(name, focus) {
  for (const tab of TABS) {
    const on = tab === name;
    const button = $(`tab-${tab}`);
    button.setAttribute("aria-selected", String(on));
    button.tabIndex = on ? 0 : -1;
    $(tab).hidden = !on;
    if (on && focus) button.focus();
  }
  if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
  if (name === "engine") opened(refresh);
}

function tabs() {
  for (const tab of TABS) $(`tab-${tab}`).addEventListener("click", () => select(tab, false));
  $("tab-chat").parentElement.addEventListener("keydown", (e) => {
    const at = TABS.findIndex((t) => $(`tab-${t}`).getAttribute("aria-selected") === "true");
    const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
    if (step) select(TABS[(at + step + TABS.length) % TABS.length], true);
  });
  select(location.hash === "#engine" ? "engine" : "chat", false);
}

$("forget").addEventListener("click", () => {
  forget();
  status("The token is forgotten; the next call asks for it.");
});
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) refresh();
});
start();
tabs();
refresh();
