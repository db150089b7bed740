// The toolbridge web console: plain JS against the daemon's /v1 API, no build step.
// Everything the API returns is rendered with textContent, never as HTML.
"use strict";

const PAGE = 25;
const state = {
  key: sessionStorage.getItem("toolbridge-api-key") || "",
  current: null,
  offset: 0,
  live: null,
};
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(child instanceof Node ? child : String(child));
    }
  }
  return node;
}

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  if (state.key) headers.Authorization = "Bearer " + state.key;
  if (options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) {
    $("key-form").hidden = false;
    throw new Error("this daemon needs an API key");
  }
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try {
      const body = await response.json();
      if (body.error) message = body.error.message;
    } catch (ignored) { /* not JSON */ }
    throw new Error(message);
  }
  return options.raw ? response : response.json();
}

// --- conversations ------------------------------------------------------------------------------

async function loadConversations() {
  const page = await api(`/v1/conversations?limit=${PAGE}&offset=${state.offset}`);
  const list = $("conversations");
  list.replaceChildren();
  for (const conv of page.items) {
    const item = el("li", { "data-testid": "conversation-item", "data-id": conv.conversation_id },
      conv.conversation_id.slice(0, 18),
      el("small", {}, `${conv.status} · ${conv.messages} message(s)`));
    if (conv.conversation_id === state.current) item.classList.add("selected");
    item.addEventListener("click", () => openConversation(conv.conversation_id));
    list.append(item);
  }
  const last = Math.min(page.total, state.offset + page.items.length);
  $("page-info").textContent = page.total ? `${state.offset + 1}-${last} of ${page.total}` : "none";
  $("prev-page").disabled = state.offset === 0;
  $("next-page").disabled = last >= page.total;
}

function toolCallNode(call) {
  const failed = Boolean(call.error);
  const node = el("div", { class: "tool-call" + (failed ? " error" : ""), "data-testid": "tool-call",
                           "data-call-id": call.call_id });
  fillToolCall(node, call);
  return node;
}

function fillToolCall(node, call) {
  const args = typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments);
  const done = call.output !== undefined && call.output !== null;
  const duration = call.duration_ms !== undefined && call.duration_ms !== null
    ? `${Number(call.duration_ms).toFixed(1)} ms` : "";
  node.classList.toggle("error", Boolean(call.error));
  node.replaceChildren(
    el("div", {}, el("code", { "data-testid": "tool-name" }, call.name), " ",
       el("span", { class: "meta" }, done ? duration : (call.state || "running…")),
       call.error ? el("span", { class: "kind", "data-testid": "tool-error" }, " " + call.error) : null),
    el("pre", { "data-testid": "tool-arguments" }, args),
    done ? el("pre", { "data-testid": "tool-output" }, call.output) : null);
}

function renderTranscript(detail) {
  const box = $("transcript");
  box.replaceChildren();
  // Platform conversations after the first replaced a stuck one: say so where it happened.
  const switches = (detail.platform_conversations || []).slice(1);
  detail.messages.forEach((message, index) => {
    const next = detail.messages[index + 1];
    box.append(el("div", { class: "message user" }, message.query));
    for (const change of switches.filter((s) => s.created_at >= message.created_at &&
                                                (!next || s.created_at < next.created_at))) {
      box.append(el("div", { class: "note", "data-testid": "platform-switch" },
                    `continued in a new platform conversation ${change.platform_conversation_id}: `,
                    change.reason));
    }
    for (const call of detail.tool_calls.filter((c) => c.message_id === message.message_id)) {
      box.append(toolCallNode(call));
    }
    const failed = message.status === "failed";
    const text = failed ? `${message.error_code}: ${message.error_message}` : message.answer;
    box.append(el("div", { class: "message agent" + (failed ? " failed" : ""),
                           "data-testid": "answer" }, text || "…",
                  el("div", { class: "meta" }, message.status)));
  });
  box.scrollTop = box.scrollHeight;
}

async function openConversation(id) {
  state.current = id;
  $("conversation-title").textContent = "Conversation " + id;
  $("message-input").disabled = false;
  $("send-button").disabled = false;
  const detail = await api(`/v1/conversations/${encodeURIComponent(id)}`);
  renderTranscript(detail);
  await loadConversations();
  if (detail.busy && !state.live) {
    const response = await api(`/v1/conversations/${encodeURIComponent(id)}/events`, { raw: true });
    await followLive(id, null, response);
  }
}

async function newConversation() {
  const created = await api("/v1/conversations", { method: "POST", body: "{}" });
  state.offset = 0;
  await openConversation(created.conversation_id);
}

// --- live run (Server-Sent Events over fetch) ---------------------------------------------------

async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { name, data: JSON.parse(data.join("\n")) };
    }
  }
}

async function followLive(id, query, response) {
  const box = $("transcript");
  if (query !== null) box.append(el("div", { class: "message user" }, query));
  const calls = el("div");
  const answer = el("div", { class: "message agent", "data-testid": "answer" });
  const answerText = el("span", { "data-testid": "live-answer" });
  const meta = el("div", { class: "meta" }, "running…");
  answer.append(answerText, meta);
  box.append(calls, answer);
  const nodes = new Map();
  state.live = id;
  try {
    for await (const event of sseEvents(response)) {
      const d = event.data;
      if (event.name === "text_delta") answerText.textContent += d.text;
      else if (event.name === "tool_call_started") {
        const node = toolCallNode({ ...d, state: "running…" });
        nodes.set(d.call_id, node);
        calls.append(node);
      } else if (event.name === "tool_call_finished") {
        let node = nodes.get(d.call_id);
        if (!node) { node = toolCallNode(d); nodes.set(d.call_id, node); calls.append(node); }
        fillToolCall(node, d);
      } else if (event.name === "failed") {
        answer.classList.add("failed");
        meta.textContent = `failed: ${d.message}`;
      } else if (event.name === "done") {
        meta.textContent = d.status;
        if (d.result && !answerText.textContent) answerText.textContent = d.result.answer;
      }
      box.scrollTop = box.scrollHeight;
    }
  } finally {
    state.live = null;
  }
  await loadConversations();
}

async function send(event) {
  event.preventDefault();
  const input = $("message-input");
  const query = input.value.trim();
  if (!query) return;
  input.value = "";
  $("send-button").disabled = true;
  try {
    if (!state.current) await newConversation();  // typing first starts a conversation
    const response = await api(`/v1/conversations/${encodeURIComponent(state.current)}/messages`,
      { method: "POST", body: JSON.stringify({ query, stream: true }), raw: true });
    await followLive(state.current, query, response);
    status("");
  } catch (error) {
    status(error.message, true);
  } finally {
    $("send-button").disabled = false;
  }
}

// --- tools --------------------------------------------------------------------------------------

async function loadTools() {
  const data = await api("/v1/tools");
  const list = $("tools");
  list.replaceChildren();
  for (const tool of data.tools) {
    const flags = [tool.idempotent ? "idempotent" : "", tool.confirm ? "needs approval" : ""]
      .filter(Boolean).join(", ");
    list.append(el("li", { "data-testid": "tool" }, el("code", {}, tool.name),
      flags ? el("span", { class: "meta" }, ` (${flags})`) : null,
      el("div", {}, tool.description)));
  }
  const problem = $("tools-error");
  problem.hidden = !data.last_reload_error;
  problem.textContent = data.last_reload_error ? "Last reload failed: " + data.last_reload_error : "";
}

async function reloadTools() {
  try {
    await api("/v1/tools/reload", { method: "POST" });
    status("tools reloaded");
  } catch (error) {
    status(error.message, true);
  }
  await loadTools();
}

// --- start --------------------------------------------------------------------------------------

function guard(fn) {
  return (...args) => fn(...args).catch((error) => status(error.message, true));
}

async function refresh() {
  await loadConversations();
  await loadTools();
  status("connected");
}

document.addEventListener("DOMContentLoaded", () => {
  $("new-conversation").addEventListener("click", guard(newConversation));
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
  $("key-form").addEventListener("submit", guard(async (event) => {
    event.preventDefault();
    state.key = $("key-input").value;
    sessionStorage.setItem("toolbridge-api-key", state.key);
    $("key-form").hidden = true;
    await refresh();
  }));
  guard(refresh)();
  setInterval(() => { if (!state.live) guard(loadConversations)(); }, 5000);
});
