// The header: platform, health, live state.

import { api, authHeaders, forbidden } from "./api.js";
import { el, put, txt } from "./render.js";
import { $ } from "./state.js";

export async function loadInfo() {
  let info;
  try {
    info = await api("/v1/info");
  } catch (error) {
    if (!forbidden(error)) throw error;
    $("platform-info").replaceChildren();  // this key may not observe the daemon
    return;
  }
  const box = $("platform-info");
  const kind = info.is_emulator ? `${info.platform} emulator` : info.platform;
  put(box,
    el("span", { class: "chip" + (info.is_emulator ? " emulator" : " real"),
                 "data-testid": "platform-kind" }, kind),
    info.base_url ? el("span", { "data-testid": "platform-url" }, info.base_url) : null,
    info.app_id ? el("span", {}, "app ", el("code", { "data-testid": "platform-app" },
                                             info.app_id)) : null,
    info.model ? el("span", {}, "model ", el("code", {}, info.model)) : null,
    el("span", { class: "meta" }, "v" + txt(info.version)));
  box.title = `daemon started ${new Date(info.started_at).toLocaleString()}`;
  $("tool-count").textContent = String(info.tools);
  $("tool-count").title = `${info.tools} tool(s), generation ${info.generation}`;
}

export async function checkHealth() {
  const node = $("health");
  try {
    const response = await fetch("/readyz", { headers: authHeaders() });
    let detail = "";
    try {
      const body = await response.json();
      detail = body.error ? body.error.message : `${txt(body.tools)} tools, ` +
               `${txt(body.in_flight)} running`;
    } catch (ignored) { /* not JSON */ }
    node.textContent = response.ok ? "ready" : "not ready";
    node.className = "health " + (response.ok ? "ok" : "bad");
    node.title = detail || `/readyz answered ${response.status}`;
  } catch (error) {
    node.textContent = "unreachable";
    node.className = "health bad";
    node.title = "the daemon does not answer";
  }
}

export function setLive(text, kind) {
  const node = $("live-state");
  node.textContent = text;
  node.className = "live " + kind;
}
