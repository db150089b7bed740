// The toolbridge web console: plain JS against the daemon's /v1 API, no build step.
// Everything the API returns is rendered with textContent, never as HTML.
//
// One Server-Sent Events stream per page (GET /v1/events) keeps everything live: the list of
// conversations, the open conversation (whoever sends to it), approvals, the tools. When that
// stream cannot be held, the page falls back to polling and says so in the header.
//
// main.js starts the page; the other modules each own one part of it.

import { loadApprovals, tickDeadlines } from "./approvals.js";
import {
  closeConversation,
  loadConversations,
  newConversation,
  openConversation,
  send,
} from "./conversations.js";
import { followHub } from "./events.js";
import { checkHealth, loadInfo } from "./header.js";
import { status } from "./render.js";
import { $, PAGE, state } from "./state.js";
import { loadTools, reloadTools } from "./tools.js";

async function route() {
  const hash = location.hash || "#/";
  const tools = hash.startsWith("#/tools");
  $("tools-view").hidden = !tools;
  $("conversations-view").hidden = tools;
  $("view-tools").setAttribute("aria-current", tools ? "page" : "false");
  $("view-conversations").setAttribute("aria-current", tools ? "false" : "page");
  if (tools) return;
  const match = hash.match(/^#\/c\/(.+)$/);
  const id = match ? decodeURIComponent(match[1]) : null;
  if (id && id !== state.current) await openConversation(id);
  else if (!id && state.current) closeConversation();
}

function guard(fn) {
  return (...args) => fn(...args).catch((error) => status(error.message, true));
}


async function start() {
  await Promise.all([loadInfo(), checkHealth(), loadApprovals(), loadTools(),
                     loadConversations()]);
  status("connected");
  // Follow first: a deep link to a deleted (or mistyped) conversation fails its route, and
  // that must not leave the page without live updates.
  followHub();
  await route();
}

document.addEventListener("DOMContentLoaded", () => {
  closeConversation();
  $("new-conversation").addEventListener("click", guard(async () => {
    await newConversation();
    $("message-input").focus();
  }));
  $("message-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();  // isComposing: Enter also confirms a Chinese IME candidate
      $("send-form").requestSubmit();
    }
  });
  $("send-form").addEventListener("submit", guard(send));
  $("reload-tools").addEventListener("click", guard(reloadTools));
  $("prev-page").addEventListener("click", guard(async () => {
    state.offset = Math.max(0, state.offset - PAGE); await loadConversations();
  }));
  $("next-page").addEventListener("click", guard(async () => {
    state.offset += PAGE; await loadConversations();
  }));
  $("approvals-link").addEventListener("click", (event) => {
    event.preventDefault();
    $("approvals").scrollIntoView({ block: "start" });
    const first = $("approvals").querySelector("button, input");
    if (first) first.focus();
  });
  $("key-form").addEventListener("submit", guard(async (event) => {
    event.preventDefault();
    state.key = $("key-input").value;
    sessionStorage.setItem("toolbridge-api-key", state.key);
    $("key-form").hidden = true;
    await start();
  }));
  window.addEventListener("hashchange", guard(route));
  setInterval(tickDeadlines, 10000);
  setInterval(checkHealth, 15000);
  guard(start)();
});
