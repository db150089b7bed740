// Small helpers that build and fill DOM nodes (textContent only, never HTML).

import { $, FOLD_CHARS, FOLD_LINES, timers } from "./state.js";

export function el(tag, attrs = {}, ...children) {
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
export function put(node, ...children) {
  node.replaceChildren(...children.filter((c) => c !== null && c !== undefined && c !== false));
}

// Never a literal "null" or "undefined" on screen.
export const txt = (value) => (value === null || value === undefined ? "" : String(value));

export function status(message, isError = false) {
  $("status").textContent = message;
  $("status").className = isError ? "error" : "";
}

export function debounce(name, fn, ms = 150) {
  clearTimeout(timers[name]);
  timers[name] = setTimeout(() => fn().catch((error) => status(error.message, true)), ms);
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function humanDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(Number(ms))) return "";
  const value = Number(ms);
  if (value < 10) return `${value.toFixed(1)} ms`;
  if (value < 1000) return `${Math.round(value)} ms`;
  if (value < 60000) return `${(value / 1000).toFixed(1)} s`;
  const minutes = Math.floor(value / 60000);
  const seconds = Math.round((value % 60000) / 1000);
  return seconds ? `${minutes} min ${seconds} s` : `${minutes} min`;
}

export function timeNode(iso) {
  if (!iso) return null;
  const when = new Date(iso);
  if (Number.isNaN(when.getTime())) return null;
  const today = new Date().toDateString() === when.toDateString();
  const shown = today ? when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit",
                                                      second: "2-digit" })
                      : when.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
  return el("time", { datetime: when.toISOString(), title: when.toString() }, shown);
}

export function untilText(iso) {
  const left = (new Date(iso).getTime() - Date.now()) / 1000;
  if (Number.isNaN(left)) return "";
  if (left <= 0) return "deadline passed";
  if (left < 90) return `${Math.round(left)} s left`;
  if (left < 5400) return `${Math.round(left / 60)} min left`;
  return `${Math.round(left / 3600)} h left`;
}

// JSON pretty-printed; a string holding JSON is parsed first. Empty stays empty.
export function pretty(value) {
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
export function foldedPre(testid, content, empty) {
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

export function copyButton(label, getText) {
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
