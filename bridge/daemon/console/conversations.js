// The conversations list, the open conversation's transcript, sending a message.

import { api, forbidden } from "./api.js";
import { conversationTitle } from "./approvals.js";
import { signature } from "./events.js";
import { el, put, status, timeNode, txt } from "./render.js";
import { $, PAGE, state } from "./state.js";
import { endTurn, makeTurn, showRunError, turnCall } from "./turns.js";

export function pendingByConversation() {
  const counts = new Map();
  for (const approval of state.approvals) {
    counts.set(approval.conversation_id, (counts.get(approval.conversation_id) || 0) + 1);
  }
  return counts;
}

export async function loadConversations() {
  let page;
  try {
    page = await api(`/v1/conversations?limit=${PAGE}&offset=${state.offset}`);
  } catch (error) {
    if (!forbidden(error)) throw error;
    $("new-conversation").hidden = true;  // this key may not read nor open conversations
    page = { items: [], total: 0 };
  }
  state.conversations = page.items;
  renderConversations();
  const last = Math.min(page.total, state.offset + page.items.length);
  $("page-info").textContent = page.total ? `${state.offset + 1}-${last} of ${page.total}` : "none";
  $("prev-page").disabled = state.offset === 0;
  $("next-page").disabled = last >= page.total;
}

export function renderConversations() {
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


export function atBottom(box) {
  return box.scrollHeight - box.scrollTop - box.clientHeight < 60;
}

export function keepScrolled(fn) {
  const box = $("transcript");
  const stick = atBottom(box);
  fn();
  if (stick) box.scrollTop = box.scrollHeight;
}

export function renderTranscript(detail) {
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

export function showHeading(detail) {
  const conv = detail.conversation;
  $("conversation-title").textContent = detail.title || "New conversation";
  put($("conversation-meta"),
    el("code", { title: "conversation id" }, conv.conversation_id),
    " · opened ", timeNode(conv.created_at),
    conv.end_user_id ? ` · for ${conv.end_user_id}` : "",
    detail.busy ? el("span", { class: "chip wait" }, "answering") : null);
}

export async function openConversation(id) {
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

export function closeConversation() {
  state.current = null;
  state.turns = new Map();
  state.openTurn = null;
  $("conversation-title").textContent = "No conversation selected";
  $("conversation-meta").replaceChildren();
  put($("transcript"), el("p", { class: "meta empty" },
    "Choose a conversation, or type a message to start one."));
  renderConversations();
}

export async function newConversation() {
  const created = await api("/v1/conversations", { method: "POST", body: "{}" });
  state.offset = 0;
  history.replaceState(null, "", "#/c/" + created.conversation_id);
  await openConversation(created.conversation_id);
}

export async function send(event) {
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

export function showPrompt(turn, prompt) {
  turn.answerText.textContent = txt(prompt);
  turn.answerText.classList.remove("meta");
  turn.statusText.textContent = "waiting for your answer (send it as the next message)";
}
