// The toolbridge web console: plain JS against the daemon's /v1 API, no build step.
// Everything the API returns is rendered with textContent, never as HTML.
//
// One Server-Sent Events stream per page (GET /v1/events) keeps everything live: the list of
// conversations, the open conversation (whoever sends to it), approvals, the tools. When that
// stream cannot be held, the page falls back to polling and says so in the header.
"use strict";

const PAGE = 25;
const FOLD_LINES = 14;
const FOLD_CHARS = 1500;
const POLL_MS = 4000;

const state = {
  key: sessionStorage.getItem("toolbridge-api-key") || "",
  current: null,        // the open conversation's id
  offset: 0,
  conversations: [],    // the page of the list on screen
  approvals: [],        // pending approvals
  turns: new Map(),     // message id -> turn of the open conversation
  openTurn: null,       // a turn whose message id is not known yet (run started, or own send)
  lastEventId: null,
  hubRunning: false,
  polling: null,
  pollSignature: "",
  tools: [],
  toolsSignature: "",
  heard: new Map(),     // conversation id -> how many of its events this page has handled
  openedAt: 0,          // when a conversation was last read from the journal (Date.now())
};
const $ = (id) => document.getElementById(id);
const timers = {};

// --- small helpers ------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined && child !== false) {
      node.append(child instanceof Node ? child : String(child));
    }
  }
  return node;
}

// replaceChildren() would show a null child as the text "null": leave such children out.
function put(node, ...children) {
  node.replaceChildren(...children.filter((c) => c !== null && c !== undefined && c !== false));
}

// Never a literal "null" or "undefined" on screen.
const txt = (value) => (value === null || value === undefined ? "" : String(value));

function status(message, isError = false) {
  $("status").textContent = message;
  $("status").className = isError ? "error" : "";
}

function debounce(name, fn, ms = 150) {
  clearTimeout(timers[name]);
  timers[name] = setTimeout(() => fn().catch((error) => status(error.message, true)), ms);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function humanDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(Number(ms))) return "";
  const value = Number(ms);
  if (value < 10) return `${value.toFixed(1)} ms`;
  if (value < 1000) return `${Math.round(value)} ms`;
  if (value < 60000) return `${(value / 1000).toFixed(1)} s`;
  const minutes = Math.floor(value / 60000);
  const seconds = Math.round((value % 60000) / 1000);
  return seconds ? `${minutes} min ${seconds} s` : `${minutes} min`;
}

function timeNode(iso) {
  if (!iso) return null;
  const when = new Date(iso);
  if (Number.isNaN(when.getTime())) return null;
  const today = new Date().toDateString() === when.toDateString();
  const shown = today ? when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit",
                                                      second: "2-digit" })
                      : when.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
  return el("time", { datetime: when.toISOString(), title: when.toString() }, shown);
}

function untilText(iso) {
  const left = (new Date(iso).getTime() - Date.now()) / 1000;
  if (Number.isNaN(left)) return "";
  if (left <= 0) return "deadline passed";
  if (left < 90) return `${Math.round(left)} s left`;
  if (left < 5400) return `${Math.round(left / 60)} min left`;
  return `${Math.round(left / 3600)} h left`;
}

// JSON pretty-printed; a string holding JSON is parsed first. Empty stays empty.
function pretty(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") {
    const trimmed = value.trim();
    if (/^[[{]/.test(trimmed)) {
      try { return JSON.stringify(JSON.parse(trimmed), null, 2); } catch (ignored) { /* text */ }
    }
    return value;
  }
  return JSON.stringify(value, null, 2);
}

// A <pre> that shows the first lines of a long text, with a "show all" button.
function foldedPre(testid, content, empty) {
  const box = el("div", { class: "fold" });
  const pre = el("pre", { "data-testid": testid, tabindex: "0" });
  const full = content === "" ? empty : content;
  const lines = full.split("\n");
  const long = lines.length > FOLD_LINES || full.length > FOLD_CHARS;
  if (!long) {
    pre.textContent = full;
    box.append(pre);
    return box;
  }
  const short = lines.slice(0, FOLD_LINES).join("\n").slice(0, FOLD_CHARS);
  pre.textContent = short + "\n…";
  const more = el("button", { type: "button", class: "link", "data-testid": "show-all",
                              "aria-expanded": "false" },
                  `show all (${lines.length} lines, ${full.length} characters)`);
  more.addEventListener("click", () => {
    const open = more.getAttribute("aria-expanded") === "true";
    pre.textContent = open ? short + "\n…" : full;
    more.setAttribute("aria-expanded", String(!open));
    more.textContent = open ? `show all (${lines.length} lines, ${full.length} characters)`
                            : "show less";
  });
  box.append(pre, more);
  return box;
}

function copyButton(label, getText) {
  const button = el("button", { type: "button", class: "copy", "data-testid": "copy",
                                "aria-label": label }, "Copy");
  button.addEventListener("click", async () => {
    const text = getText();
    let copied = false;
    try {
      await navigator.clipboard.writeText(text);
      copied = true;
    } catch (ignored) {
      // No clipboard API (plain http on a LAN address): copy through a hidden text area.
      const area = el("textarea", { class: "sr-only", "aria-hidden": "true" });
      area.value = text;
      document.body.append(area);
      area.select();
      try { copied = document.execCommand("copy"); } catch (alsoIgnored) { copied = false; }
      area.remove();
    }
    button.textContent = copied ? "Copied" : "Copy failed";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  });
  return button;
}

// --- the API ------------------------------------------------------------------------------------

function authHeaders(extra = {}) {
  const headers = { ...extra };
  if (state.key) headers.Authorization = "Bearer " + state.key;
  return headers;
}

async function api(path, options = {}) {
  const headers = authHeaders(options.headers || {});
  if (options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) {
    $("key-form").hidden = false;
    const error = new Error("this daemon needs an API key");
    error.code = "unauthorized";
    throw error;
  }
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    let code = "http_" + response.status;
    try {
      const body = await response.json();
      if (body.error) { message = body.error.message; code = body.error.code; }
    } catch (ignored) { /* not JSON */ }
    const error = new Error(message);
    error.code = code;
    error.status = response.status;
    throw error;
  }
  return response.json();
}

// --- header: platform, health, tools ------------------------------------------------------------

async function loadInfo() {
  const info = await api("/v1/info");
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

async function checkHealth() {
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

function setLive(text, kind) {
  const node = $("live-state");
  node.textContent = text;
  node.className = "live " + kind;
}

// --- conversations list -------------------------------------------------------------------------

function pendingByConversation() {
  const counts = new Map();
  for (const approval of state.approvals) {
    counts.set(approval.conversation_id, (counts.get(approval.conversation_id) || 0) + 1);
  }
  return counts;
}

async function loadConversations() {
  const page = await api(`/v1/conversations?limit=${PAGE}&offset=${state.offset}`);
  state.conversations = page.items;
  renderConversations();
  const last = Math.min(page.total, state.offset + page.items.length);
  $("page-info").textContent = page.total ? `${state.offset + 1}-${last} of ${page.total}` : "none";
  $("prev-page").disabled = state.offset === 0;
  $("next-page").disabled = last >= page.total;
}

function renderConversations() {
  const list = $("conversations");
  const pending = pendingByConversation();
  list.replaceChildren();
  for (const conv of state.conversations) {
    const waiting = pending.get(conv.conversation_id) || 0;
    const selected = conv.conversation_id === state.current;
    const button = el("button", { type: "button", class: "conv",
                                  "aria-current": selected ? "true" : null },
      el("span", { class: "title" }, conv.title || "New conversation"),
      waiting ? el("span", { class: "badge", "data-testid": "approval-badge",
                             title: `${waiting} call(s) wait for approval` },
                   `${waiting} approval${waiting > 1 ? "s" : ""}`) : null,
      el("small", {}, `${conv.status} · ${conv.messages} message(s) · `,
         timeNode(conv.updated_at)));
    button.addEventListener("click", () => { location.hash = "#/c/" + conv.conversation_id; });
    const item = el("li", { "data-testid": "conversation-item", "data-id": conv.conversation_id,
                            class: selected ? "selected" : null }, button);
    list.append(item);
  }
  if (!state.conversations.length) list.append(el("li", { class: "meta empty" },
                                                  "No conversations yet: type a message."));
  for (const link of document.querySelectorAll("[data-title-of]")) {
    link.textContent = conversationTitle(link.dataset.titleOf);
  }
}

// --- one message and its run ("turn") -----------------------------------------------------------

function makeTurn({ messageId = null, query = "", createdAt = null, sentBy = null, live = false }) {
  const turn = { messageId, live, calls: new Map(), ended: false, failed: false };
  turn.root = el("article", { class: "turn", "data-testid": "turn" });
  if (query) {
    turn.root.append(el("div", { class: "message user", "data-testid": "user-message" },
      el("div", { class: "text" }, query),
      el("div", { class: "meta" }, timeNode(createdAt), sentBy ? ` · from ${sentBy}` : "")));
  }
  turn.callsBox = el("div", { class: "calls" });
  turn.answerText = el("div", { class: "text", "data-testid": live ? "live-answer" : null });
  turn.error = el("div", { class: "run-error", "data-testid": "run-error", role: "alert",
                           hidden: true });
  turn.statusText = el("span", { "data-testid": "run-status" }, live ? "running…" : "");
  turn.duration = el("span", { class: "duration" });
  turn.answer = el("div", { class: "message agent" + (live ? " running" : ""),
                            "data-testid": "answer" },
    turn.answerText, turn.error,
    el("div", { class: "meta" }, turn.statusText, turn.duration,
       copyButton("Copy the answer", () => turn.answerText.textContent)));
  turn.root.append(turn.callsBox, turn.answer);
  return turn;
}

function showRunError(turn, code, message) {
  turn.failed = true;
  turn.answer.classList.add("failed");
  turn.error.hidden = false;
  put(turn.error, el("strong", { class: "kind", "data-testid": "error-kind" },
                                txt(code) || "error"), ": ", txt(message));
}

function endTurn(turn, { status: runStatus, answer, durationMs, error }) {
  turn.ended = true;
  turn.answer.classList.remove("running");
  if (answer && turn.answerText.textContent !== answer) turn.answerText.textContent = answer;
  if (error) showRunError(turn, error.code, error.message);
  turn.statusText.textContent = txt(runStatus);
  turn.duration.textContent = durationMs !== null && durationMs !== undefined
    ? " · " + humanDuration(durationMs) : "";
  if (!turn.answerText.textContent && !turn.failed && runStatus !== "running") {
    turn.answerText.textContent = runStatus === "waiting_input" ? "" : "(no answer text)";
    turn.answerText.classList.add("meta");
  }
}

function callCard(call) {
  const card = el("div", { class: "tool-call", "data-testid": "tool-call",
                           "data-call-id": call.call_id });
  fillCall(card, call);
  return card;
}

function fillCall(card, call) {
  const done = call.output !== undefined && call.output !== null;
  const running = call.state === "started" || call.state === "running";
  card.classList.toggle("error", Boolean(call.error));
  const stateText = call.error ? call.error : done ? "ok"
    : call.approval ? call.approval : running ? "running…" : txt(call.state) || "queued";
  const args = pretty(call.arguments);
  const head = el("div", { class: "call-head" },
    el("code", { "data-testid": "tool-name" }, call.name),
    el("span", { class: "chip " + (call.error ? "bad" : done ? "ok" : "wait"),
                 "data-testid": call.error ? "tool-error" : "tool-state" }, stateText),
    el("span", { class: "meta" }, done ? humanDuration(call.duration_ms) : ""),
    timeNode(call.started_at));
  const argsBox = el("details", { class: "args", open: true },
    el("summary", {}, "Arguments"),
    foldedPre("tool-arguments", args === "{}" ? "" : args, "(no arguments)"));
  const parts = [head, argsBox];
  if (done) {
    const output = pretty(call.output);
    parts.push(el("details", { class: "output", open: true },
      el("summary", {}, call.error ? "Output (the model reads this error)" : "Output"),
      foldedPre("tool-output", output, "(empty output)"),
      copyButton("Copy the output", () => output)));
  }
  put(card, ...parts);
}

function turnCall(turn, call) {
  let card = turn.calls.get(call.call_id);
  if (!card) {
    card = callCard(call);
    turn.calls.set(call.call_id, card);
    turn.callsBox.append(card);
    card.data = call;
  } else {
    card.data = { ...card.data, ...call };
    fillCall(card, card.data);
  }
  return card;
}

// --- transcript ---------------------------------------------------------------------------------

function atBottom(box) {
  return box.scrollHeight - box.scrollTop - box.clientHeight < 60;
}

function keepScrolled(fn) {
  const box = $("transcript");
  const stick = atBottom(box);
  fn();
  if (stick) box.scrollTop = box.scrollHeight;
}

function renderTranscript(detail) {
  const box = $("transcript");
  box.replaceChildren();
  state.turns = new Map();
  state.openTurn = null;
  // Platform conversations after the first replaced a stuck one: say so where it happened.
  const switches = (detail.platform_conversations || []).slice(1);
  detail.messages.forEach((message, index) => {
    const next = detail.messages[index + 1];
    const turn = makeTurn({ messageId: message.message_id, query: message.query,
                            createdAt: message.created_at, sentBy: message.sent_by,
                            live: message.status === "running" });
    for (const change of switches.filter((s) => s.created_at >= message.created_at &&
                                                (!next || s.created_at < next.created_at))) {
      turn.callsBox.append(el("div", { class: "note", "data-testid": "platform-switch" },
        `continued in a new platform conversation ${change.platform_conversation_id}: `,
        txt(change.reason)));
    }
    for (const call of detail.tool_calls.filter((c) => c.message_id === message.message_id)) {
      turnCall(turn, call);
    }
    for (const approval of state.approvals.filter((a) => a.message_id === message.message_id &&
                                                        a.conversation_id === detail.conversation.conversation_id)) {
      const card = turn.calls.get(approval.call_id);
      if (card && !card.data.output) turnCall(turn, { call_id: approval.call_id, approval: "waiting for approval" });
    }
    turn.answerText.textContent = message.answer || "";
    if (message.status === "running") {
      turn.answer.classList.add("running");
      turn.statusText.textContent = "running…";
      if (detail.busy) state.openTurn = turn;
    } else {
      const took = message.finished_at
        ? new Date(message.finished_at) - new Date(message.created_at) : null;
      endTurn(turn, {
        status: message.status, answer: message.answer, durationMs: took,
        error: message.status === "failed"
          ? { code: message.error_code, message: message.error_message } : null,
      });
    }
    state.turns.set(message.message_id, turn);
    box.append(turn.root);
  });
  if (!detail.messages.length) {
    box.append(el("p", { class: "meta empty" }, "No messages yet. Everything sent to this " +
                  "conversation, from here or any other client, shows up here as it happens."));
  }
  box.scrollTop = box.scrollHeight;
}

function showHeading(detail) {
  const conv = detail.conversation;
  $("conversation-title").textContent = detail.title || "New conversation";
  put($("conversation-meta"),
    el("code", { title: "conversation id" }, conv.conversation_id),
    " · opened ", timeNode(conv.created_at),
    conv.end_user_id ? ` · for ${conv.end_user_id}` : "",
    detail.busy ? el("span", { class: "chip wait" }, "answering") : null);
}

async function openConversation(id) {
  state.openedAt = Date.now();
  let detail;
  for (let tries = 1; ; tries += 1) {
    const heard = state.heard.get(id) || 0;
    detail = await api(`/v1/conversations/${encodeURIComponent(id)}`);
    // Events of this conversation shown while it was read may be newer than this copy of the
    // journal (which is written before they are sent): read it again rather than undo them.
    if ((state.heard.get(id) || 0) === heard || tries >= 3) break;
  }
  // A run whose run_started came while the journal was being read (from this daemon or from
  // another replica) has no message in this copy yet: keep the live turn its events fill.
  const open = state.current === id ? state.openTurn : null;
  const known = open && (open.messageId === null || open.messageId === undefined
    ? detail.messages.some((m) => m.status === "running")
    : detail.messages.some((m) => m.message_id === open.messageId));
  const keep = open && open.live && !open.ended && !known ? open : null;
  state.current = id;
  state.pollSignature = signature(detail);
  showHeading(detail);
  renderTranscript(detail);
  if (keep) {
    const empty = $("transcript").querySelector(".empty");
    if (empty) empty.remove();
    $("transcript").append(keep.root);
    state.openTurn = keep;
    if (keep.messageId !== null && keep.messageId !== undefined) {
      state.turns.set(keep.messageId, keep);
    }
  }
  $("message-input").disabled = false;
  $("send-button").disabled = false;
  renderConversations();
}

function closeConversation() {
  state.current = null;
  state.turns = new Map();
  state.openTurn = null;
  $("conversation-title").textContent = "No conversation selected";
  $("conversation-meta").replaceChildren();
  put($("transcript"), el("p", { class: "meta empty" },
    "Choose a conversation, or type a message to start one."));
  renderConversations();
}

async function newConversation() {
  const created = await api("/v1/conversations", { method: "POST", body: "{}" });
  state.offset = 0;
  history.replaceState(null, "", "#/c/" + created.conversation_id);
  await openConversation(created.conversation_id);
}

async function send(event) {
  event.preventDefault();
  const input = $("message-input");
  const query = input.value.trim();
  if (!query) return;
  $("send-button").disabled = true;
  try {
    if (!state.current) await newConversation();  // typing first starts a conversation
  } catch (error) {
    status(error.message, true);
    $("send-button").disabled = false;
    return;
  }
  input.value = "";
  const conversationId = state.current;
  const turn = makeTurn({ query, createdAt: new Date().toISOString(), live: true });
  keepScrolled(() => {
    const empty = $("transcript").querySelector(".empty");
    if (empty) empty.remove();
    $("transcript").append(turn.root);
  });
  turn.own = true;
  state.openTurn = turn;
  $("transcript").scrollTop = $("transcript").scrollHeight;
  try {
    // The answer streams in through the page's one event stream; this reply is the backstop.
    const result = await api(`/v1/conversations/${encodeURIComponent(conversationId)}/messages`,
      { method: "POST", body: JSON.stringify({ query }) });
    if (!turn.ended) {
      for (const run of result.tool_runs || []) turnCall(turn, run);
      endTurn(turn, { status: result.status, answer: result.answer,
                      durationMs: turn.startedAt ? Date.now() - turn.startedAt : null });
      if (result.human_input_prompt) showPrompt(turn, result.human_input_prompt);
    }
    status("");
  } catch (error) {
    if (!turn.ended) endTurn(turn, { status: "failed", error: { code: error.code,
                                                                message: error.message } });
    else if (!turn.failed) showRunError(turn, error.code, error.message);
  } finally {
    $("send-button").disabled = false;
    if (state.openTurn === turn && turn.ended) state.openTurn = null;
  }
}

function showPrompt(turn, prompt) {
  turn.answerText.textContent = txt(prompt);
  turn.answerText.classList.remove("meta");
  turn.statusText.textContent = "waiting for your answer (send it as the next message)";
}

// --- live events --------------------------------------------------------------------------------

function turnFor(data, create = true) {
  if (data.conversation_id !== state.current) return null;
  if (data.message_id !== null && data.message_id !== undefined &&
      state.turns.has(data.message_id)) {
    return state.turns.get(data.message_id);
  }
  let turn = state.openTurn;
  if (!turn) {
    if (!create) return null;
    turn = makeTurn({ live: true });
    keepScrolled(() => $("transcript").append(turn.root));
    state.openTurn = turn;
  }
  if (data.message_id !== null && data.message_id !== undefined) {
    turn.messageId = data.message_id;
    state.turns.set(data.message_id, turn);
  }
  return turn;
}

function onRunStarted(data) {
  scheduleList();
  if (data.conversation_id !== state.current) return;
  const own = state.openTurn && state.openTurn.own && !state.openTurn.claimed;
  // Or the running message the journal already showed (its run_started came after the read:
  // from another replica, a notification may be slower than the journal).
  const shown = state.openTurn && !state.openTurn.own && !state.openTurn.claimed &&
    !state.openTurn.ended && state.openTurn.messageId !== null &&
    state.openTurn.messageId !== undefined;
  let turn = own || shown ? state.openTurn : null;
  if (!turn) {
    turn = makeTurn({ messageId: data.message_id, query: data.query ||
                      (data.recovered ? "(resuming a message a restart interrupted)" : ""),
                      createdAt: data.at, sentBy: data.sent_by, live: true });
    keepScrolled(() => {
      const empty = $("transcript").querySelector(".empty");
      if (empty) empty.remove();
      $("transcript").append(turn.root);
    });
  }
  turn.claimed = true;
  turn.startedAt = Date.now();
  state.openTurn = turn;
  if (data.message_id !== null && data.message_id !== undefined) {
    state.turns.set(data.message_id, turn);
  }
}

function handleEvent(name, data) {
  if (data && data.conversation_id) {
    state.heard.set(data.conversation_id, (state.heard.get(data.conversation_id) || 0) + 1);
  }
  switch (name) {
    case "conversation_created":
      scheduleList();
      return;
    case "run_started":
      onRunStarted(data);
      return;
    case "run_ended": {
      scheduleList();
      const turn = turnFor(data, false);
      if (turn) {
        keepScrolled(() => endTurn(turn, { status: data.status, answer: data.answer,
                                            durationMs: data.duration_ms, error: data.error }));
        if (state.openTurn === turn) state.openTurn = null;
      } else if (data.conversation_id === state.current) {
        debounce("reopen", () => openConversation(state.current));
      }
      if (data.conversation_id === state.current) debounce("heading", refreshHeading, 300);
      return;
    }
    case "approval_requested":
    case "approval_decided": {
      scheduleApprovals();
      const turn = turnFor(data, false);
      const card = turn && turn.calls.get(data.call_id);
      if (card && !card.data.output) {
        const by = data.decided_by ? ` by ${data.decided_by}` : "";
        turnCall(turn, { call_id: data.call_id,
                         approval: data.status === "pending" ? "waiting for approval"
                                                             : `${data.status}${by}` });
      }
      return;
    }
    case "tools_reloaded":
    case "tools_reload_failed":
      debounce("tools", async () => { await loadTools(); await loadInfo(); });
      return;
    case "reset": {
      const asked = Date.now();
      debounce("refresh", () => refreshAll(asked));
      return;
    }
    case "closing":
      setLive("daemon stopping", "bad");
      return;
    default:
      break;
  }
  const turn = turnFor(data);
  if (!turn) return;
  keepScrolled(() => {
    if (name === "text_delta") {
      turn.answerText.classList.remove("meta");
      turn.answerText.textContent += data.text;
    } else if (name === "tool_calls") {
      for (const call of data.calls || []) {
        if (!turn.calls.has(call.call_id)) turnCall(turn, { ...call, state: "queued" });
      }
    } else if (name === "tool_call_started") {
      turnCall(turn, { ...data, state: "running" });
    } else if (name === "tool_call_finished") {
      turnCall(turn, { ...data, approval: null, state: "finished" });
    } else if (name === "finished") {
      if (data.answer && !turn.answerText.textContent) turn.answerText.textContent = data.answer;
    } else if (name === "failed") {
      showRunError(turn, data.code, data.message);  // run_ended keeps it: it never overwrites
    } else if (name === "human_input") {
      showPrompt(turn, data.prompt);
    }
  });
}

async function refreshHeading() {
  if (!state.current) return;
  const detail = await api(`/v1/conversations/${encodeURIComponent(state.current)}`);
  if (detail.conversation.conversation_id === state.current) showHeading(detail);
}

function scheduleList() { debounce("list", loadConversations, 200); }
function scheduleApprovals() { debounce("approvals", loadApprovals, 100); }

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
      let id = null;
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        else if (line.startsWith("id:")) id = line.slice(3).trim();
      }
      if (data.length) yield { name, id, data: JSON.parse(data.join("\n")) };
    }
  }
}

// One stream per page, resumed with Last-Event-ID; polling while it cannot be held.
async function followHub() {
  if (state.hubRunning) return;
  state.hubRunning = true;
  let failures = 0;
  try {
    for (;;) {
      try {
        const headers = authHeaders();
        if (state.lastEventId !== null) headers["Last-Event-ID"] = state.lastEventId;
        const response = await fetch("/v1/events", { headers, cache: "no-store" });
        if (response.status === 401) {
          $("key-form").hidden = false;
          setLive("offline", "bad");
          return;
        }
        if (!response.ok || !response.body) throw new Error("event stream: " + response.status);
        for await (const event of sseEvents(response)) {
          if (event.name === "hello") {
            // Followed from here on. A first stream (no id to resume from) may have missed
            // what happened while the page loaded; after failures, polling may have: reload.
            if (state.lastEventId === null || failures) {
              const asked = Date.now();
              debounce("refresh", () => refreshAll(asked));
            }
            if (state.lastEventId === null) state.lastEventId = String(event.data.last_id);
            failures = 0;
            setLive("live", "ok");
            stopPolling();
            continue;
          }
          if (event.id) state.lastEventId = event.id;
          try {
            handleEvent(event.name, event.data);
          } catch (error) {
            status(`could not show a ${event.name} event: ${error.message}`, true);
          }
        }
      } catch (error) {
        // Network error or stream cut: try again below.
      }
      failures += 1;
      if (failures >= 3) {
        setLive("polling", "warn");
        startPolling();
      } else {
        setLive("reconnecting…", "warn");
      }
      checkHealth();
      await sleep(Math.min(15000, 500 * 2 ** Math.min(failures, 5)));
    }
  } finally {
    state.hubRunning = false;
  }
}

function signature(detail) {
  return JSON.stringify([detail.busy, detail.messages.map((m) => [m.status, m.answer.length]),
                         detail.tool_calls.map((c) => c.state)]);
}

function startPolling() {
  if (state.polling) return;
  state.polling = setInterval(async () => {
    try {
      await loadConversations();
      await loadApprovals();
      if (state.current) {
        const detail = await api(`/v1/conversations/${encodeURIComponent(state.current)}`);
        const now = signature(detail);
        if (now !== state.pollSignature && !(state.openTurn && state.openTurn.own)) {
          state.pollSignature = now;
          showHeading(detail);
          renderTranscript(detail);
        }
      }
    } catch (ignored) { /* the header says the daemon is unreachable */ }
  }, POLL_MS);
}

function stopPolling() {
  if (state.polling) clearInterval(state.polling);
  state.polling = null;
}

// --- approvals ----------------------------------------------------------------------------------

async function loadApprovals() {
  const page = await api("/v1/approvals?status=pending&limit=200");
  state.approvals = page.items;
  renderApprovals();
  renderConversations();
}

function conversationTitle(id) {
  const conv = state.conversations.find((c) => c.conversation_id === id);
  return conv && conv.title ? conv.title : `conversation ${id.slice(0, 12)}`;
}

function renderApprovals() {
  const section = $("approvals");
  const list = $("approval-list");
  const shown = new Map([...list.children].map((node) => [node.dataset.approvalId, node]));
  const wanted = new Set(state.approvals.map((a) => a.approval_id));
  for (const [id, node] of shown) if (!wanted.has(id)) node.remove();
  for (const approval of state.approvals) {
    if (!shown.has(approval.approval_id)) list.append(approvalCard(approval));
  }
  const count = state.approvals.length;
  section.hidden = count === 0;
  $("approvals-link").hidden = count === 0;
  $("approvals-count").textContent = String(count);
  $("approvals-heading").textContent = count === 1 ? "1 tool call waits for your approval"
                                                   : `${count} tool calls wait for your approval`;
}

function approvalCard(approval) {
  const id = approval.approval_id;
  const noteId = "note-" + id;
  const note = el("input", { id: noteId, type: "text", maxlength: "2000",
                             "data-testid": "approval-note",
                             placeholder: "why (the model reads it with a rejection)" });
  const problem = el("p", { class: "error", role: "alert", hidden: true });
  const approve = el("button", { type: "button", class: "approve", "data-testid": "approve" },
                     "Approve");
  const reject = el("button", { type: "button", class: "reject", "data-testid": "reject" },
                    "Reject");
  const open = el("a", { href: "#/c/" + approval.conversation_id,
                         "data-title-of": approval.conversation_id }, conversationTitle(
    approval.conversation_id));
  const deadline = el("span", { class: "deadline", "data-deadline": approval.deadline,
                                title: new Date(approval.deadline).toString() },
                      untilText(approval.deadline));
  const card = el("article", { class: "approval", "data-testid": "approval",
                               "data-approval-id": id, "aria-label": `approval of ${approval.tool}` },
    el("div", { class: "call-head" }, el("code", { "data-testid": "approval-tool" }, approval.tool),
       " in ", open),
    foldedPre("approval-arguments", pretty(approval.arguments), "(no arguments)"),
    el("div", { class: "meta" }, "asked by ", el("strong", {}, approval.requested_by || "anonymous"),
       " · ", timeNode(approval.requested_at), " · ", deadline),
    el("div", { class: "decide" },
      el("label", { for: noteId }, "Note (optional)"), note, approve, reject),
    problem);
  const decide = async (decision) => {
    approve.disabled = true;
    reject.disabled = true;
    problem.hidden = true;
    try {
      await api(`/v1/approvals/${encodeURIComponent(id)}`, {
        method: "POST", body: JSON.stringify({ decision, note: note.value.trim() }) });
      status(`${decision === "approve" ? "approved" : "rejected"} ${approval.tool}`);
      card.remove();
      state.approvals = state.approvals.filter((a) => a.approval_id !== id);
      renderApprovals();
      renderConversations();
    } catch (error) {
      problem.hidden = false;
      problem.textContent = error.message;
      approve.disabled = false;
      reject.disabled = false;
      scheduleApprovals();
    }
  };
  approve.addEventListener("click", () => decide("approve"));
  reject.addEventListener("click", () => decide("reject"));
  return card;
}

function tickDeadlines() {
  for (const node of document.querySelectorAll("[data-deadline]")) {
    node.textContent = untilText(node.dataset.deadline);
  }
}

// --- tools --------------------------------------------------------------------------------------

function resolve(schema, root) {
  let node = schema || {};
  if (node.$ref && typeof node.$ref === "string") {
    const name = node.$ref.split("/").pop();
    node = { ...((root.$defs || root.definitions || {})[name] || {}), ...node };
  }
  const options = node.anyOf || node.oneOf;
  if (options && !node.type) {
    const real = options.filter((option) => option.type !== "null");
    if (real.length === 1) return { ...resolve(real[0], root), ...node, anyOf: undefined,
                                    nullable: true };
  }
  return node;
}

function typeLabel(node, root) {
  const resolved = resolve(node, root);
  if (resolved.type === "array") {
    const items = resolve(resolved.items || {}, root);
    return `array of ${txt(items.type) || "values"}`;
  }
  if (resolved.type) return Array.isArray(resolved.type) ? resolved.type.join(" | ")
                                                         : resolved.type;
  const options = node.anyOf || node.oneOf;
  if (options) return options.map((o) => typeLabel(o, root)).join(" | ");
  if (resolved.enum) return "enum";
  return "any";
}

function parameterRows(tool) {
  const root = tool.parameters || {};
  const required = new Set(root.required || []);
  return Object.entries(root.properties || {}).map(([name, schema]) => ({
    name, schema: resolve(schema, root), raw: schema, required: required.has(name),
    type: typeLabel(schema, root),
  }));
}

function sourceLabel(source) {
  const kinds = { python: "Python", http: "HTTP manifest", openapi: "OpenAPI document",
                  mcp: "MCP server" };
  return kinds[source.kind] || source.kind;
}

async function loadTools() {
  const data = await api("/v1/tools");
  state.tools = data.tools;
  $("tools-generation").textContent = `generation ${data.generation}, loaded `;
  $("tools-generation").append(timeNode(data.loaded_at) || "");
  // Rebuilt only when the tools changed: a half-filled "try it" form stays as it is.
  const signature = JSON.stringify([data.generation, data.tools]);
  if (signature !== state.toolsSignature) {
    state.toolsSignature = signature;
    const list = $("tools");
    list.replaceChildren();
    for (const tool of data.tools) list.append(toolCard(tool));
    if (!data.tools.length) list.append(el("li", { class: "meta" }, "No tools are loaded."));
  }
  const problem = $("tools-error");
  problem.hidden = !data.last_reload_error;
  problem.textContent = data.last_reload_error ? "Last reload failed: " + data.last_reload_error
                                               : "";
  $("tool-count").textContent = String(data.tools.length);
}

function toolCard(tool) {
  const flags = [
    tool.confirm ? el("span", { class: "chip alert" }, "needs approval") : null,
    tool.idempotent ? el("span", { class: "chip" }, "idempotent") : null,
    tool.read_only ? el("span", { class: "chip" }, "read-only") : null,
    el("span", { class: "chip muted" }, tool.timeout ? `timeout ${humanDuration(tool.timeout * 1000)}`
                                                     : "default timeout"),
  ];
  const rows = parameterRows(tool);
  const table = rows.length
    ? el("table", { class: "params", "data-testid": "tool-params" },
        el("caption", { class: "sr-only" }, `Parameters of ${tool.name}`),
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Parameter"),
                           el("th", { scope: "col" }, "Type"),
                           el("th", { scope: "col" }, "Required"),
                           el("th", { scope: "col" }, "Description"))),
        el("tbody", {}, ...rows.map((row) => el("tr", { "data-testid": "tool-param",
                                                        "data-name": row.name },
          el("td", {}, el("code", {}, row.name)),
          el("td", {}, row.type),
          el("td", {}, row.required ? "required" : "optional"),
          el("td", {}, txt(row.schema.description),
             row.schema.enum ? el("div", { class: "meta", "data-testid": "tool-enum" },
                                  "one of: " + row.schema.enum.map((v) => JSON.stringify(v))
                                    .join(", ")) : null,
             row.schema.default !== undefined && row.schema.default !== null
               ? el("div", { class: "meta" }, "default: " + JSON.stringify(row.schema.default))
               : null)))))
    : el("p", { class: "meta" }, "No parameters.");
  return el("li", { class: "tool-card", "data-testid": "tool", "data-name": tool.name },
    el("div", { class: "tool-head" },
      el("h3", {}, el("code", {}, tool.name)),
      tool.title ? el("span", { class: "meta" }, tool.title) : null,
      ...flags),
    el("div", { class: "meta source", "data-testid": "tool-source" },
       sourceLabel(tool.source) + " · ", el("code", {}, tool.source.location)),
    tool.toolkit
      ? el("div", { class: "meta toolkit", "data-testid": "tool-toolkit" },
           "toolkit ", el("code", {}, tool.toolkit),
           tool.toolkit_description ? " · " + txt(tool.toolkit_description) : null)
      : null,
    el("p", {}, txt(tool.description)),
    table,
    tryForm(tool, rows));
}

function fieldFor(tool, row, id) {
  const schema = row.schema;
  if (schema.enum) {
    const select = el("select", { id },
      row.required ? null : el("option", { value: "" }, "(leave out)"),
      ...schema.enum.map((value) => el("option", { value: JSON.stringify(value) },
                                       txt(value))));
    select.read = () => (select.value === "" ? undefined : JSON.parse(select.value));
    return select;
  }
  if (schema.type === "boolean") {
    const select = el("select", { id }, el("option", { value: "" }, "(leave out)"),
                      el("option", { value: "true" }, "true"),
                      el("option", { value: "false" }, "false"));
    select.read = () => (select.value === "" ? undefined : select.value === "true");
    return select;
  }
  if (schema.type === "integer" || schema.type === "number") {
    const input = el("input", { id, type: "number", step: schema.type === "integer" ? "1" : "any",
                                inputmode: "decimal" });
    input.read = () => (input.value === "" ? undefined : Number(input.value));
    return input;
  }
  if (schema.type === "string") {
    const input = el("input", { id, type: "text", autocomplete: "off" });
    input.read = () => (input.value === "" ? undefined : input.value);
    return input;
  }
  const area = el("textarea", { id, rows: "3", placeholder: "JSON, e.g. " +
                                (schema.type === "array" ? "[1, 2]" : '{"key": "value"}') });
  area.read = () => {
    if (area.value.trim() === "") return undefined;
    try {
      return JSON.parse(area.value);
    } catch (error) {
      throw new Error(`${row.name}: not valid JSON (${error.message})`);
    }
  };
  return area;
}

function tryForm(tool, rows) {
  const form = el("form", { class: "try", novalidate: true });
  const fields = [];
  for (const row of rows) {
    const id = `try-${tool.name}-${row.name}`;
    const input = fieldFor(tool, row, id);
    input.setAttribute("data-testid", "try-field");
    input.setAttribute("data-name", row.name);
    fields.push([row.name, input]);
    form.append(el("label", { for: id }, el("code", {}, row.name),
                   row.required ? el("span", { class: "required", title: "required" }, " *")
                                : null,
                   el("span", { class: "meta" }, " " + row.type)), input);
  }
  let confirm = null;
  if (tool.confirm) {
    const id = `try-${tool.name}-confirm`;
    confirm = el("input", { id, type: "checkbox", "data-testid": "try-confirm" });
    form.append(el("div", { class: "confirm" }, confirm,
      el("label", { for: id }, `I approve this call: ${tool.name} needs a person's decision, ` +
                               "and it really runs")));
  }
  const run = el("button", { type: "submit", "data-testid": "try-run" }, "Run");
  const result = el("div", { class: "try-result", "data-testid": "try-result",
                             "aria-live": "polite" });
  form.append(el("div", { class: "actions" }, run), result);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    put(result, el("span", { class: "meta" }, "running…"));
    run.disabled = true;
    try {
      const args = {};
      for (const [name, input] of fields) {
        const value = input.read();
        if (value !== undefined) args[name] = value;
      }
      const body = { arguments: args, confirm: confirm ? confirm.checked : false };
      const output = await api(`/v1/tools/${encodeURIComponent(tool.name)}/call`,
                               { method: "POST", body: JSON.stringify(body) });
      const text = pretty(output.output);
      put(result,
        el("div", { class: "meta" },
           el("span", { class: "chip " + (output.error ? "bad" : "ok"),
                        "data-testid": "try-state" }, output.error || "ok"),
           " in ", humanDuration(output.duration_ms)),
        foldedPre("try-output", text, "(empty output)"),
        copyButton("Copy the output", () => text));
    } catch (error) {
      put(result, el("p", { class: "error", role: "alert",
                                       "data-testid": "try-error" },
        error.code ? el("strong", {}, error.code + ": ") : null, error.message));
    } finally {
      run.disabled = false;
    }
  });
  return el("details", { class: "try-it", "data-testid": "try-it" },
            el("summary", {}, "Try it"), form);
}

async function reloadTools() {
  try {
    const reloaded = await api("/v1/tools/reload", { method: "POST" });
    status(`tools reloaded: generation ${reloaded.generation}`);
  } catch (error) {
    status(error.message, true);
  }
  await loadTools();
}

// --- views and start ----------------------------------------------------------------------------

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

async function refreshAll(asked = Date.now()) {
  await Promise.all([loadInfo(), checkHealth(), loadApprovals(), loadTools()]);
  await loadConversations();
  // A message this page is sending keeps its live turn: re-rendering from the journal now
  // would detach the node its answer is written into (the hub's events keep it current).
  const sending = state.openTurn && state.openTurn.own && !state.openTurn.ended;
  // A conversation opened after the refresh was asked for was read from a journal at least as
  // new as the refresh would read, and kept current by events since: reading it again would
  // only replace the live turns this page drew (a message just sent from here) with copies.
  const fresh = state.openedAt >= asked;
  if (state.current && !sending && !fresh) await openConversation(state.current);
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
