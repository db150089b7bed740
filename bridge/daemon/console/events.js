// Live events: one Server-Sent Events stream per page, polling while it cannot be held.

import { api, authHeaders } from "./api.js";
import { loadApprovals } from "./approvals.js";
import {
  keepScrolled,
  loadConversations,
  openConversation,
  renderTranscript,
  showHeading,
  showPrompt,
} from "./conversations.js";
import { checkHealth, loadInfo, setLive } from "./header.js";
import { debounce, sleep, status } from "./render.js";
import { $, POLL_MS, state } from "./state.js";
import { loadTools } from "./tools.js";
import { endTurn, makeTurn, showRunError, turnCall } from "./turns.js";

export function turnFor(data, create = true) {
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

export function onRunStarted(data) {
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

export function handleEvent(name, data) {
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

export async function refreshHeading() {
  if (!state.current) return;
  const detail = await api(`/v1/conversations/${encodeURIComponent(state.current)}`);
  if (detail.conversation.conversation_id === state.current) showHeading(detail);
}

export function scheduleList() { debounce("list", loadConversations, 200); }
export function scheduleApprovals() { debounce("approvals", loadApprovals, 100); }

export async function* sseEvents(response) {
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
export async function followHub() {
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
        if (response.status === 403) {
          // This key may not follow conversations (an approver only): poll what it may see.
          setLive("polling", "warn");
          startPolling();
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

export function signature(detail) {
  return JSON.stringify([detail.busy, detail.messages.map((m) => [m.status, m.answer.length]),
                         detail.tool_calls.map((c) => c.state)]);
}

export function startPolling() {
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

export function stopPolling() {
  if (state.polling) clearInterval(state.polling);
  state.polling = null;
}

export async function refreshAll(asked = Date.now()) {
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
