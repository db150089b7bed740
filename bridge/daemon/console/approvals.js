// Pending approvals: the cards to decide them, their deadlines.

import { api, forbidden } from "./api.js";
import { renderConversations } from "./conversations.js";
import { scheduleApprovals } from "./events.js";
import { el, foldedPre, pretty, status, timeNode, untilText } from "./render.js";
import { $, state } from "./state.js";

export async function loadApprovals() {
  let page;
  try {
    page = await api("/v1/approvals?status=pending&limit=200");
  } catch (error) {
    if (!forbidden(error)) throw error;
    page = { items: [] };  // this key may not approve: no approvals panel
  }
  state.approvals = page.items;
  renderApprovals();
  renderConversations();
}

export function conversationTitle(id) {
  const conv = state.conversations.find((c) => c.conversation_id === id);
  return conv && conv.title ? conv.title : `conversation ${id.slice(0, 12)}`;
}

export function renderApprovals() {
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

export function approvalCard(approval) {
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
  // Titled by its own call (tool and call id): a conversation may ask for several, and its
  // title (its first message) says nothing about which call this one is.
  const card = el("article", { class: "approval", "data-testid": "approval",
                               "data-approval-id": id,
                               "aria-label": `approval of ${approval.tool} (call ${approval.call_id})` },
    el("div", { class: "call-head" }, el("code", { "data-testid": "approval-tool" }, approval.tool),
       el("span", { class: "meta", "data-testid": "approval-call" }, `call ${approval.call_id}`),
       el("span", { class: "meta" }, "in ", open)),
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
      status(`${decision === "approve" ? "approved" : "rejected"} ${approval.tool} (call ${approval.call_id})`);
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

export function tickDeadlines() {
  for (const node of document.querySelectorAll("[data-deadline]")) {
    node.textContent = untilText(node.dataset.deadline);
  }
}
