// The tools view: each tool's parameters and a form to try it.

import { api, forbidden } from "./api.js";
import {
  copyButton,
  el,
  foldedPre,
  humanDuration,
  pretty,
  put,
  status,
  timeNode,
  txt,
} from "./render.js";
import { $, state } from "./state.js";

export function resolve(schema, root) {
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

export function typeLabel(node, root) {
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

export function parameterRows(tool) {
  const root = tool.parameters || {};
  const required = new Set(root.required || []);
  return Object.entries(root.properties || {}).map(([name, schema]) => ({
    name, schema: resolve(schema, root), raw: schema, required: required.has(name),
    type: typeLabel(schema, root),
  }));
}

export function sourceLabel(source) {
  const kinds = { python: "Python", http: "HTTP manifest", openapi: "OpenAPI document",
                  mcp: "MCP server" };
  return kinds[source.kind] || source.kind;
}

export async function loadTools() {
  let data;
  try {
    data = await api("/v1/tools");
  } catch (error) {
    if (!forbidden(error)) throw error;
    $("view-tools").hidden = true;  // this key may not list tools
    return;
  }
  $("view-tools").hidden = false;
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

export function toolCard(tool) {
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

export function fieldFor(tool, row, id) {
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

export function tryForm(tool, rows) {
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

export async function reloadTools() {
  try {
    const reloaded = await api("/v1/tools/reload", { method: "POST" });
    status(`tools reloaded: generation ${reloaded.generation}`);
  } catch (error) {
    status(error.message, true);
  }
  await loadTools();
}
