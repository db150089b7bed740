// One message and its run (a "turn"): the question, the tool calls, the answer.

import {
  copyButton,
  el,
  foldedPre,
  humanDuration,
  pretty,
  put,
  timeNode,
  txt,
} from "./render.js";

export function makeTurn({ messageId = null, query = "", createdAt = null, sentBy = null, live = false }) {
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

export function showRunError(turn, code, message) {
  turn.failed = true;
  turn.answer.classList.add("failed");
  turn.error.hidden = false;
  put(turn.error, el("strong", { class: "kind", "data-testid": "error-kind" },
                                txt(code) || "error"), ": ", txt(message));
}

export function endTurn(turn, { status: runStatus, answer, durationMs, error }) {
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

export function callCard(call) {
  const card = el("div", { class: "tool-call", "data-testid": "tool-call",
                           "data-call-id": call.call_id });
  fillCall(card, call);
  return card;
}

export function fillCall(card, call) {
  const done = call.output !== undefined && call.output !== null;
  const running = call.state === "started" || call.state === "running";
  card.classList.toggle("error", Boolean(call.error));
  const stateText = call.error ? call.error : done ? "ok"
    : call.approval ? call.approval : running ? "running…" : txt(call.state) || "queued";
  // A call a restart cut short (not run again: its tool is not idempotent) is journaled with
  // a duration of 0 (no finished tool_error lasts exactly 0 ms) and an output saying so. How
  // long it ran before the daemon stopped is not known: the card says so, rather than "0.0 ms"
  // or the time since it started.
  const interrupted = call.error === "tool_error" && Number(call.duration_ms) === 0;
  const took = interrupted ? "interrupted by a restart: ran for an unknown time"
    : humanDuration(call.duration_ms);
  const args = pretty(call.arguments);
  const head = el("div", { class: "call-head" },
    el("code", { "data-testid": "tool-name" }, call.name),
    el("span", { class: "chip " + (call.error ? "bad" : done ? "ok" : "wait"),
                 "data-testid": call.error ? "tool-error" : "tool-state" }, stateText),
    el("span", { class: "meta", "data-testid": "tool-duration" }, done ? took : ""),
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

export function turnCall(turn, call) {
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
