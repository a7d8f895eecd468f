// The ecotone web UI: one session (one env instance) per browser tab, driven through the
// native HTTP API. Opened on load, closed on unload (a beacon to /v1/sessions/{id}/close);
// the server's idle timeout reaps what a crashed tab leaves behind.

import { SchemaForm, el } from "/web/form.js";

const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(frame, status) {
    super(frame.message || `HTTP ${status}`);
    this.code = frame.code || "http";
    this.details = frame.details || {};
    this.status = status;
  }
}

async function api(method, path, body) {
  const init = { method, headers: {} };
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
  return data;
}

const app = {
  info: null,
  sid: null,
  form: null,
  mode: "form",
  records: [], // the episode, in ecotone.recording's format (what the download holds)
  header: null,
  steps: 0,
  total: 0,
  ended: false,
  renderable: null, // unknown until the first try; false once the env says `unsupported`
  busy: false,
};

function setStatus(text, kind = "") {
  const status = $("status");
  status.textContent = text;
  status.className = kind;
}

function setBusy(busy) {
  app.busy = busy;
  $("reset-button").disabled = busy;
  $("step-button").disabled = busy || app.ended || app.records.length === 0;
}

const sessionPath = (suffix) => `/v1/sessions/${encodeURIComponent(app.sid)}/${suffix}`;

// --- values shown as readable fields -------------------------------------------------------

function isPlain(value) {
  return value === null || ["string", "number", "boolean"].includes(typeof value);
}

function renderValue(value, depth = 0) {
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

function showFields(container, value, skip = new Set()) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    container.replaceChildren(fieldList(value, skip));
  } else {
    container.replaceChildren(renderValue(value));
  }
}

const FLAGS = new Set(["reward", "done", "truncated"]);

function showObservation(obs) {
  $("reward").textContent = obs.reward === null || obs.reward === undefined ? "-" : String(obs.reward);
  $("return").textContent = String(Math.round(app.total * 1e9) / 1e9);
  $("step-count").textContent = String(app.steps);
  $("done").textContent = String(Boolean(obs.done));
  $("truncated").textContent = String(Boolean(obs.truncated));
  showFields($("observation-fields"), obs, FLAGS);
  $("observation-raw").textContent = JSON.stringify(obs, null, 2);
  const end = $("episode-end");
  end.hidden = !app.ended;
  end.textContent = app.ended
    ? `Episode over (${obs.done ? "done" : "truncated"}), return ${$("return").textContent}. ` +
      "Reset to start another."
    : "";
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

function showRendered(frame) {
  const view = $("render-view");
  view.dataset.kind = frame.kind;
  if (frame.kind === "image") {
    view.replaceChildren(el("img", {
      src: `data:image/png;base64,${frame.content}`,
      alt: `${app.info.name}: the env's view`,
    }));
  } else if (frame.kind === "html") {
    // Sandboxed: the env's HTML is shown, its scripts never run.
    view.replaceChildren(el("iframe", {
      sandbox: "",
      srcdoc: frame.content,
      title: `${app.info.name}: the env's view`,
    }));
  } else if (frame.kind === "markdown") {
    view.replaceChildren(markdown(frame.content));
  } else {
    view.replaceChildren(el("pre", { class: "text-block", text: frame.content }));
  }
}

async function refreshRender() {
  if (app.renderable === false || !app.sid) return;
  try {
    showRendered(await api("GET", sessionPath("render")));
    app.renderable = true;
    $("render-panel").hidden = false;
  } catch (exc) {
    if (exc.code === "unsupported") {
      app.renderable = false;
      $("render-panel").hidden = true;
    } else {
      $("render-panel").hidden = false;
      $("render-view").replaceChildren(el("p", { class: "error", text: `render: ${exc.message}` }));
    }
  }
}

async function refreshState() {
  if (!app.sid) return;
  try {
    const frame = await api("GET", sessionPath("state"));
    showFields($("state-fields"), frame.state);
    $("state-raw").textContent = JSON.stringify(frame.state, null, 2);
    if (app.header && frame.state && frame.state.episode_id) {
      app.header.episode_id = frame.state.episode_id;
    }
  } catch (exc) {
    $("state-fields").replaceChildren(el("p", { class: "error", text: `state: ${exc.message}` }));
  }
}

// --- sessions ------------------------------------------------------------------------------

async function openSession() {
  const frame = await api("POST", "/v1/sessions", {});
  app.sid = frame.session;
  $("session-id").textContent = app.sid;
  document.body.dataset.session = app.sid;
}

function closeSession() {
  if (!app.sid) return;
  const path = sessionPath("close");
  app.sid = null;
  if (!navigator.sendBeacon(path)) {
    fetch(path, { method: "POST", keepalive: true }).catch(() => {});
  }
}

// A session the server no longer knows (idle past its timeout): open a fresh one.
async function recover(exc) {
  if (exc.code !== "unknown_session") return false;
  await openSession();
  app.records = [];
  app.ended = false;
  setStatus("the old session had closed (idle too long?); opened a new one: reset to play", "warn");
  return true;
}

// --- episode -------------------------------------------------------------------------------

function trajectoryRow(index, action, obs) {
  const compact = (value) => {
    const text = JSON.stringify(value);
    return el("code", { title: text, text: text.length > 140 ? `${text.slice(0, 140)}…` : text });
  };
  const flags = [obs.done && "done", obs.truncated && "truncated"].filter(Boolean).join(", ");
  const reward = obs.reward === null || obs.reward === undefined ? "" : String(obs.reward);
  return el("tr", { "data-step": index },
    el("td", { text: String(index) }),
    el("td", {}, action === null ? el("em", { text: "reset" }) : compact(action)),
    el("td", {}, compact(obs)),
    el("td", { text: reward }),
    el("td", { text: flags }));
}

async function doReset(event) {
  event?.preventDefault();
  $("reset-error").textContent = "";
  const seedText = $("reset-seed").value.trim();
  let seed = null;
  if ($("reset-seed").validity.badInput || (seedText !== "" && !/^-?\d+$/.test(seedText))) {
    $("reset-error").textContent = "the seed must be an integer";
    return;
  }
  if (seedText !== "") seed = Number(seedText);
  let options = {};
  const optionsText = $("reset-options").value.trim();
  if (optionsText !== "") {
    try {
      options = JSON.parse(optionsText);
    } catch (exc) {
      $("reset-error").textContent = `reset options are not valid JSON: ${exc.message}`;
      $("reset-options-box").open = true;
      return;
    }
    if (!options || typeof options !== "object" || Array.isArray(options)) {
      $("reset-error").textContent = "reset options must be a JSON object";
      $("reset-options-box").open = true;
      return;
    }
  }
  if (app.info.tasks && Object.keys(app.info.tasks).length && !("task" in options)) {
    options = { ...options, split: $("reset-split").value };
    const index = $("reset-task").value;
    if (index !== "") options.index = Number(index);
  }
  const body = {};
  if (seed !== null) body.seed = seed;
  if (Object.keys(options).length) body.options = options;
  setBusy(true);
  setStatus("resetting…");
  try {
    let frame;
    try {
      frame = await api("POST", sessionPath("reset"), body);
    } catch (exc) {
      if (!(await recover(exc))) throw exc;
      frame = await api("POST", sessionPath("reset"), body);
    }
    const obs = frame.observation;
    const now = Date.now() / 1000;
    app.header = {
      kind: "episode",
      version: 1,
      source: "web",
      env: app.info.name,
      session: app.sid,
      episode_id: null,
      seed,
      options,
      time: now,
    };
    app.records = [app.header, { kind: "reset", observation: obs, time: now }];
    app.steps = 0;
    app.total = 0;
    app.ended = Boolean(obs.done || obs.truncated);
    $("trajectory").tBodies[0].replaceChildren(trajectoryRow(0, null, obs));
    showObservation(obs);
    form().clearErrors();
    $("action-error").textContent = "";
    $("raw-error").textContent = "";
    const task = frame.task
      ? ` (task ${frame.task.id}${frame.task.split ? `, ${frame.task.split}[${frame.task.index}]` : ""})`
      : "";
    setStatus((seed === null ? "reset" : `reset with seed ${seed}`) + task);
    await Promise.all([refreshState(), refreshRender()]);
  } catch (exc) {
    $("reset-error").textContent = `${exc.code}: ${exc.message}`;
    setStatus("reset failed", "error");
  } finally {
    setBusy(false);
  }
}

function readAction() {
  if (app.mode === "raw") {
    const text = $("raw-action").value.trim();
    try {
      return { ok: true, value: JSON.parse(text === "" ? "null" : text) };
    } catch (exc) {
      $("raw-error").textContent = `not valid JSON: ${exc.message}`;
      return { ok: false };
    }
  }
  return form().read();
}

function showActionError(exc) {
  if (exc.code === "invalid_action") {
    const field = exc.details.field || "";
    const reason = exc.details.reason || exc.message;
    if (app.mode === "raw") {
      $("raw-error").textContent = field ? `${field}: ${reason}` : reason;
    } else {
      form().showError(field, reason).scrollIntoView({ block: "nearest" });
    }
    setStatus("the env refused that action", "error");
  } else {
    $("action-error").textContent = `${exc.code}: ${exc.message}`;
    setStatus(`step failed: ${exc.code}`, "error");
  }
}

async function doStep(event) {
  event?.preventDefault();
  if (app.busy) return;
  $("action-error").textContent = "";
  $("raw-error").textContent = "";
  form().clearErrors();
  const read = readAction();
  if (!read.ok) {
    setStatus("fix the action first", "error");
    return;
  }
  const action = read.value;
  setBusy(true);
  setStatus("stepping…");
  const started = performance.now();
  try {
    const frame = await api("POST", sessionPath("step"), { action });
    const duration = (performance.now() - started) / 1000;
    const obs = frame.observation;
    const reward = typeof obs.reward === "number" ? obs.reward : null;
    app.steps += 1;
    app.total += reward ?? 0;
    const now = Date.now() / 1000;
    app.records.push({
      kind: "step",
      t: app.steps,
      action,
      observation: obs,
      reward,
      done: Boolean(obs.done),
      truncated: Boolean(obs.truncated),
      duration_s: duration,
      time: now,
    });
    if (obs.done || obs.truncated) {
      app.ended = true;
      app.records.push({ kind: "end", reason: obs.done ? "done" : "truncated", error: null, time: now });
    }
    $("trajectory").tBodies[0].append(trajectoryRow(app.steps, action, obs));
    showObservation(obs);
    setStatus(`step ${app.steps}`);
    await Promise.all([refreshState(), refreshRender()]);
  } catch (exc) {
    if (await recover(exc).catch(() => false)) {
      app.ended = false;
    } else {
      showActionError(exc);
    }
  } finally {
    setBusy(false);
  }
}

function download() {
  const lines = app.records.map((record) => JSON.stringify(record)).join("\n");
  const blob = new Blob([`${lines}\n`], { type: "application/x-ndjson" });
  const safe = (text) => String(text).replace(/[^A-Za-z0-9_.-]+/g, "_");
  const name = `${safe(app.info.name)}-${safe(app.header?.episode_id || app.sid)}.jsonl`;
  const link = el("a", { href: URL.createObjectURL(blob), download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

// --- the action form and raw JSON -----------------------------------------------------------

function form() {
  return app.form;
}

function setMode(mode) {
  if (mode === app.mode) return;
  $("raw-error").textContent = "";
  $("action-error").textContent = "";
  if (mode === "raw") {
    const read = form().read({ quiet: true });
    if (read.ok) $("raw-action").value = JSON.stringify(read.value, null, 2);
    else if ($("raw-action").value.trim() === "") $("raw-action").value = "{}";
  } else {
    let value;
    try {
      value = JSON.parse($("raw-action").value);
    } catch (exc) {
      $("raw-error").textContent = `not valid JSON: ${exc.message} (fix it to go back to the form)`;
      return;
    }
    if (!form().setValue(value)) {
      $("raw-error").textContent =
        "the form cannot show all of this action: keep it in raw JSON, or change it";
      return;
    }
  }
  app.mode = mode;
  $("form-view").hidden = mode !== "form";
  $("raw-view").hidden = mode !== "raw";
  $("mode-form").setAttribute("aria-selected", String(mode === "form"));
  $("mode-raw").setAttribute("aria-selected", String(mode === "raw"));
}

function showInfo(info) {
  app.info = info;
  document.title = `${info.name} · ecotone`;
  $("env-name").textContent = info.name;
  $("env-version").textContent = info.version ? `v${info.version}` : "";
  $("env-description").textContent = info.description || "";
  const readme = info.readme || "";
  $("readme").textContent = readme;
  $("readme-box").hidden = readme === "";
  $("action-schema").textContent = JSON.stringify(info.action_schema || {}, null, 2);
  $("observation-schema").textContent = JSON.stringify(info.observation_schema || {}, null, 2);
  $("state-schema").textContent = JSON.stringify(info.state_schema || {}, null, 2);
  app.form = new SchemaForm(info.action_schema || {});
  $("form-view").replaceChildren(app.form.element);
  const splits = Object.entries(info.tasks || {});
  $("task-picker").hidden = splits.length === 0;
  if (splits.length) {
    $("reset-split").replaceChildren(
      ...splits.map(([name, count]) => el("option", { value: name, text: `${name} (${count})` })));
    loadTasks();
  }
}

const TASKS_SHOWN = 200;

// A listed task as the picker names it: its id, then its public fields as compact JSON
// (the server lists no hidden field; an `id` field repeating the id is not shown twice).
function taskLabel(task, id) {
  let fields = task;
  if (id !== undefined && task && typeof task === "object" && !Array.isArray(task)) {
    fields = Object.fromEntries(Object.entries(task).filter(([key, value]) => !(key === "id" && value === id)));
  }
  let text = JSON.stringify(fields);
  if (id !== undefined && text === "{}") text = "";
  return id === undefined ? text : `${id}${text ? " " + text : ""}`;
}

// The picker's tasks: the first TASKS_SHOWN of the chosen split, each shown by `taskLabel`.
async function loadTasks() {
  const split = $("reset-split").value;
  const choices = [el("option", { value: "", text: "drawn with the seed" })];
  try {
    const page = await api("GET", `/v1/tasks?split=${encodeURIComponent(split)}&limit=${TASKS_SHOWN}`);
    const ids = page.ids || [];
    page.tasks.forEach((task, index) => {
      let label = taskLabel(task, ids[index]);
      if (label.length > 80) label = label.slice(0, 77) + "…";
      choices.push(el("option", { value: String(index), text: `${index}: ${label}` }));
    });
    if (page.total > page.tasks.length) {
      choices.push(el("option", { value: "", disabled: true, text: `… ${page.total - page.tasks.length} more (reset options: {"index": N})` }));
    }
  } catch (exc) {
    $("reset-error").textContent = `tasks: ${exc.code}: ${exc.message}`;
  }
  $("reset-task").replaceChildren(...choices);
}

// --- the server, live: what /metrics says ---------------------------------------------

const SERVER_ROWS = [
  ["sessions open", "ecotone_sessions_open"],
  ["sessions busy", "ecotone_sessions_busy"],
  ["requests queued", "ecotone_requests_queued"],
  ["sessions opened", "ecotone_sessions_opened_total"],
  ["steps", "ecotone_steps_total"],
  ["connections open", "ecotone_connections_open"],
  ["connections refused", "ecotone_connections_refused_total"],
  ["env calls hung", "ecotone_env_calls_hung"],
];

function parseMetrics(text) {
  // Prometheus' text format: `name{labels} value` lines; comments start with #.
  const samples = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const found = line.match(/^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/);
    if (found) samples.set(found[1] + (found[2] || ""), Number(found[3]));
  }
  return samples;
}

function serverRow(label, name, value) {
  const row = document.createElement("tr");
  const head = document.createElement("th");
  head.textContent = label;
  const cell = document.createElement("td");
  cell.dataset.metric = name;
  cell.textContent = String(value);
  row.append(head, cell);
  return row;
}

async function refreshServer() {
  let text;
  try {
    const response = await fetch("/metrics");
    if (!response.ok) return;
    text = await response.text();
  } catch {
    return; // the server is going, or gone: the rest of the page says so
  }
  const samples = parseMetrics(text);
  const rows = SERVER_ROWS.filter(([, name]) => samples.has(name)).map(([label, name]) =>
    serverRow(label, name, samples.get(name)));
  for (const [key, value] of samples) {
    const error = key.match(/^ecotone_errors_total\{code="([^"]+)"\}$/);
    if (error) rows.push(serverRow(`errors: ${error[1]}`, key, value));
  }
  $("server-metrics").querySelector("tbody").replaceChildren(...rows);
}

async function start() {
  $("reset-form").addEventListener("submit", doReset);
  $("reset-split").addEventListener("change", loadTasks);
  $("action-form").addEventListener("submit", doStep);
  $("mode-form").addEventListener("click", () => setMode("form"));
  $("mode-raw").addEventListener("click", () => setMode("raw"));
  $("state-refresh").addEventListener("click", () => refreshState());
  $("download").addEventListener("click", download);
  window.addEventListener("pagehide", closeSession);
  window.addEventListener("pageshow", async (event) => {
    if (event.persisted && !app.sid) {
      await openSession();
      await doReset();
    }
  });
  setBusy(true);
  setStatus("connecting…");
  try {
    const described = await api("GET", "/v1/describe");
    showInfo(described.info);
    await openSession();
  } catch (exc) {
    setStatus(`cannot start: ${exc.message}`, "error");
    return;
  }
  await doReset();
  document.body.dataset.ready = "true";
  refreshServer();
  setInterval(refreshServer, 2000);
}

start();
