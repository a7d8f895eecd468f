// What every page of the web UI shows the same way: the native API's answers (`api`, which
// throws an `ApiError` for an error frame), values as readable fields, and an env's own view
// (`showRendered`: text, markdown built as DOM nodes, a PNG, HTML in a sandboxed frame, or an
// SVG cleaned by board.js and shown inline).

import { el } from "/web/form.js";
import { sanitizeSvg } from "/web/board.js";

export class ApiError extends Error {
  constructor(frame, status) {
    super(frame.message || `HTTP ${status}`);
    this.code = frame.code || "http";
    this.details = frame.details || {};
    this.status = status;
  }
}

// Where an answer keeps its ETag (a seat's view has one): a symbol, so that JSON.stringify
// leaves it out.
export const ETAG = Symbol("etag");

// One request of the native API; its answer frame (an `ApiError` for an error frame).
// Nothing is cached: a waiting request must reach the server whatever else is in flight.
export async function api(method, path, body, headers = {}) {
  const init = { method, headers: { ...headers }, cache: "no-store" };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["content-type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (exc) {
    throw new ApiError({ code: "network", message: `the server is unreachable (${exc.message})` }, 0);
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (data && data.op === "error") throw new ApiError(data, response.status);
  if (!response.ok || data === null) {
    throw new ApiError({ code: "http", message: `HTTP ${response.status}` }, response.status);
  }
  const etag = response.headers.get("etag");
  if (etag && typeof data === "object") data[ETAG] = etag;
  return data;
}

// --- values shown as readable fields -------------------------------------------------------

function isPlain(value) {
  return value === null || ["string", "number", "boolean"].includes(typeof value);
}

export function renderValue(value, depth = 0) {
  if (typeof value === "string") {
    if (value.includes("\n")) return el("pre", { class: "text-block", text: value });
    return el("span", { class: value === "" ? "string empty" : "string", text: value || '""' });
  }
  if (isPlain(value)) return el("code", { text: JSON.stringify(value) });
  if (Array.isArray(value)) {
    if (value.every(isPlain) && !value.some((v) => typeof v === "string" && v.includes("\n"))) {
      const items = value.map((v) => (typeof v === "string" ? v : JSON.stringify(v)));
      return el("span", { class: "list", text: `[${items.join(", ")}]` });
    }
    if (depth < 2 && value.length <= 50) {
      const list = el("ol", { start: 0 });
      for (const item of value) list.append(el("li", {}, renderValue(item, depth + 1)));
      return list;
    }
    return el("pre", { class: "json", text: JSON.stringify(value, null, 1) });
  }
  if (depth < 2) return fieldList(value, new Set(), depth + 1);
  return el("pre", { class: "json", text: JSON.stringify(value, null, 1) });
}

function fieldList(object, skip, depth = 0) {
  const list = el("dl", { class: "kv" });
  for (const [key, value] of Object.entries(object)) {
    if (skip.has(key)) continue;
    if (key === "metadata" && value && Object.keys(value).length === 0) continue;
    list.append(
      el("div", { class: "kv-row" },
        el("dt", { text: key }),
        el("dd", { "data-key": key }, renderValue(value, depth))),
    );
  }
  return list;
}

export function showFields(container, value, skip = new Set()) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    container.replaceChildren(fieldList(value, skip));
  } else {
    container.replaceChildren(renderValue(value));
  }
}

// --- the env's own view (render) -------------------------------------------------------------

function markdown(text) {
  // A small, safe subset: headings, paragraphs, lists, fenced code, `code`, **bold**, *em*,
  // links. Built as DOM nodes: the text is never parsed as HTML.
  const root = el("div", { class: "markdown" });
  const lines = text.split("\n");
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) root.append(inline(el("p"), para.join(" ")));
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    if (line.startsWith("```")) {
      flush();
      const code = [];
      for (i++; i < lines.length && !lines[i].startsWith("```"); i++) code.push(lines[i]);
      root.append(el("pre", { class: "text-block", text: code.join("\n") }));
      i++;
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    const item = /^\s*(?:[-*+]|\d+[.)])\s+(.*)$/.exec(line);
    if (heading) {
      flush();
      root.append(inline(el(`h${Math.min(heading[1].length + 2, 6)}`), heading[2]));
    } else if (item) {
      flush();
      const ordered = /^\s*\d/.test(line);
      let list = root.lastElementChild;
      if (!list || list.tagName !== (ordered ? "OL" : "UL")) {
        list = el(ordered ? "ol" : "ul");
        root.append(list);
      }
      list.append(inline(el("li"), item[1]));
    } else if (line.trim() === "") {
      flush();
      root.append(el("span", { class: "break" }));
    } else {
      para.push(line.trim());
    }
    i++;
  }
  flush();
  root.querySelectorAll("span.break").forEach((node) => node.remove());
  return root;
}

function inline(parent, text) {
  const pattern = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*]+\*)|(\[[^\]]+\]\([^)\s]+\))/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    parent.append(text.slice(last, match.index));
    const token = match[0];
    if (match[1]) parent.append(el("code", { text: token.slice(1, -1) }));
    else if (match[2]) parent.append(el("strong", { text: token.slice(2, -2) }));
    else if (match[3]) parent.append(el("em", { text: token.slice(1, -1) }));
    else {
      const [, label, href] = /^\[([^\]]+)\]\(([^)\s]+)\)$/.exec(token);
      const safe = /^https?:\/\//.test(href);
      parent.append(safe
        ? el("a", { href, text: label, target: "_blank", rel: "noopener noreferrer" })
        : label);
    }
    last = match.index + token.length;
  }
  parent.append(text.slice(last));
  return parent;
}

// The env's view (a `rendered` frame) in `view`; `name`: the env's, for the frame's title.
export function showRendered(view, frame, name) {
  view.dataset.kind = frame.kind;
  if (frame.kind === "image") {
    view.replaceChildren(el("img", {
      src: `data:image/png;base64,${frame.content}`,
      alt: `${name}: the env's view`,
    }));
  } else if (frame.kind === "html") {
    // Sandboxed: the env's HTML is shown, its scripts never run.
    view.replaceChildren(el("iframe", {
      sandbox: "",
      srcdoc: frame.content,
      title: `${name}: the env's view`,
    }));
  } else if (frame.kind === "svg") {
    // Inline, so that a board can be clicked: cleaned of anything but drawing first.
    const svg = sanitizeSvg(frame.content);
    if (svg) svg.setAttribute("aria-label", `${name}: the env's view`);
    view.replaceChildren(svg || el("p", { class: "error", text: "the env's SVG view is not valid SVG" }));
  } else if (frame.kind === "markdown") {
    view.replaceChildren(markdown(frame.content));
  } else {
    view.replaceChildren(el("pre", { class: "text-block", text: frame.content }));
  }
}
