// The ecotone web UI, driven through the native HTTP API.
//
// At /web, the page owns one session (one env instance) per browser tab: opened on load,
// closed on unload (a beacon to /v1/sessions/{id}/close; the server's idle timeout reaps what
// a crashed tab leaves behind). For a multi-agent env (describe lists `seats`) the owner
// resets the game and hands out its seats: a link per seat (/web?seat=KEY) and a spectator
// link, and the page follows the game through the spectator key.
//
// At /web?seat=KEY, the page plays that seat (the key's requests are a holder of their own,
// never the session's owner): the seat's own view, whose turn it is (waiting for its turn
// through GET /v1/seats/{key}?wait=1), and its action form; the spectator key's page shows
// the public view. An SVG board (chess) is played by clicking squares (board.js). While it is
// open the page keeps its seat (keepalives at a third of the lease), and it downloads the
// seat's own trajectory (seatpage.js).

import { SchemaForm, el, resolve } from "/web/form.js";
import { BoardClicks } from "/web/board.js";
import { ETAG, api, showFields, showRendered } from "/web/views.js";
import { downloadTrajectory, keepSeat } from "/web/seatpage.js";

const $ = (id) => document.getElementById(id);

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
  moves: false, // the action has a `move` field, which a board's clicks fill
  renderable: null, // unknown until the first try; false once the env says `unsupported`
  busy: false,
  observation: null, // the last observation shown (its legal moves guide the board)
  seated: false, // the env has seats (a multi-agent env)
  seat: null, // on a seat's page: {key, seat (null: a spectator's), seats, env}
  keys: null, // on the owner's page of a multi-agent env: the seat keys
  view: null, // the last seat view followed (a seat's own, or the public one)
  following: 0, // the follow loop's generation: a newer loop stops the older
  board: null, // the board's clicks (BoardClicks)
};

function setStatus(text, kind = "") {
  const status = $("status");
  status.textContent = text;
  status.className = kind;
}

// Whether an action may be sent now: an episode is running, and on a seat's page, it is the
// seat's turn.
function canAct() {
  if (app.busy || app.ended) return false;
  if (app.seat) return app.seat.seat !== null && app.view !== null && app.view.turn === app.seat.seat;
  return app.records.length > 0 && !app.seated;
}

function setBusy(busy) {
  app.busy = busy;
  $("reset-button").disabled = busy;
  $("step-button").disabled = !canAct();
  app.board?.update();
}

const sessionPath = (suffix) => `/v1/sessions/${encodeURIComponent(app.sid)}/${suffix}`;
const seatPath = (key, suffix = "") =>
  `/v1/seats/${encodeURIComponent(key)}${suffix ? `/${suffix}` : ""}`;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const FLAGS = new Set(["reward", "done", "truncated"]);

function showObservation(obs) {
  app.observation = obs;
  $("reward").textContent = obs.reward === null || obs.reward === undefined ? "-" : String(obs.reward);
  $("return").textContent = String(Math.round(app.total * 1e9) / 1e9);
  $("step-count").textContent = String(app.steps);
  $("done").textContent = String(Boolean(obs.done));
  $("truncated").textContent = String(Boolean(obs.truncated));
  showFields($("observation-fields"), obs, FLAGS);
  $("observation-raw").textContent = JSON.stringify(obs, null, 2);
  const end = $("episode-end");
  end.hidden = !app.ended;
  const how = obs.done ? "done" : "truncated";
  if (!app.ended) end.textContent = "";
  else if (app.seat) end.textContent = `Episode over (${how}). The owner's page starts another.`;
  else if (app.seated) end.textContent = `Episode over (${how}). Reset to start another.`;
  else end.textContent = `Episode over (${how}), return ${$("return").textContent}. Reset to start another.`;
}

// The env's own view: the session's (the owner's page), or what the seat may see.
async function refreshRender() {
  if (app.renderable === false || !(app.sid || app.seat)) return;
  const path = app.seat ? seatPath(app.seat.key, "render") : sessionPath("render");
  try {
    showRendered($("render-view"), await api("GET", path), app.info.name);
    app.board.drawn();
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

// --- seats ---------------------------------------------------------------------------------

// The owner's Seats panel: a link per seat and a spectator link (the keys are the session's,
// the same every time).
async function showSeats() {
  if (app.keys === null) {
    app.keys = await api("GET", sessionPath("seats"));
  }
  const link = (name, key, label) =>
    el("li", {},
      el("a", { href: `/web?seat=${encodeURIComponent(key)}`, target: "_blank", "data-seat": name, text: label }));
  $("seat-links").replaceChildren(
    ...Object.entries(app.keys.keys).map(([seat, key]) => link(seat, key, `play ${seat}`)),
    link("spectator", app.keys.spectate, "watch (spectator)"));
  $("seats-panel").hidden = false;
}

function showTurn(frame) {
  const turn = frame.turn ?? null;
  const obs = frame.observation || {};
  let text;
  if (turn === null) {
    text = app.ended ? `nobody's: the game is over${obs.result ? ` (${obs.result})` : ""}` : "nobody's";
  } else if (app.seat && turn === app.seat.seat) {
    text = `yours (${turn})`;
  } else {
    text = turn;
  }
  $("turn").textContent = text;
  document.body.dataset.turn = turn ?? "";
  if (frame.lost?.length) setStatus(`seat(s) lost: ${frame.lost.join(", ")}`, "warn");
}

// A seat view to show: a seat's own (its page) or the public one (the owner's, a spectator's).
async function onView(frame) {
  app.view = frame;
  const obs = frame.observation;
  app.ended = Boolean(obs.done || obs.truncated);
  showObservation(obs);
  showTurn(frame);
  setBusy(app.busy);
  if (app.seat) {
    await refreshRender();
  } else {
    await Promise.all([refreshState(), refreshRender()]);
  }
  app.board.update();
}

// Follow the game (a seat's page: until it is the seat's turn; the owner's and a spectator's:
// for good), one waiting request at a time, bounded by the server; each names the view the
// page has (its ETag), so a move made between two requests is answered at once. While the
// episode is over, a look every second notices the next reset.
async function follow() {
  const generation = ++app.following;
  const key = app.seat ? app.seat.key : app.keys.spectate;
  let wait = false; // the first look shows the view as it is now
  while (generation === app.following) {
    const over = app.view !== null && app.view.turn === null;
    const seen = app.view?.[ETAG];
    let frame;
    try {
      frame = await api("GET", seatPath(key) + (wait && !over ? "?wait=1" : ""), undefined,
        seen ? { "if-none-match": seen } : {});
    } catch (exc) {
      if (generation !== app.following) return;
      if (exc.code === "reset_required") {
        setStatus("waiting for the owner to start the game", "warn");
        await sleep(wait ? 0 : 500);
        wait = true;
        continue;
      }
      if (exc.code === "unknown_seat_key") {
        setStatus("the game's session is closed: this link plays no more", "error");
        app.ended = true;
        setBusy(app.busy);
        return;
      }
      setStatus(`${exc.code}: ${exc.message}`, "error");
      await sleep(2000);
      continue;
    }
    if (generation !== app.following) return;
    wait = true;
    if (JSON.stringify(frame) !== JSON.stringify(app.view)) {
      await onView(frame);
      if (app.seat) setStatus(canAct() ? "your turn" : frame.turn ? `waiting for ${frame.turn}` : "");
    }
    if (app.seat && canAct()) return; // the person moves next: `playSeat` follows again
    if (frame.turn === null) await sleep(1000);
  }
}

async function playSeat(action) {
  setBusy(true);
  setStatus("playing…");
  try {
    const frame = await api("POST", seatPath(app.seat.key, "play"), { action });
    app.steps += 1;
    await onView(frame);
    setStatus(`played ${JSON.stringify(action)}`);
  } catch (exc) {
    showActionError(exc);
  } finally {
    setBusy(false);
  }
  if (!canAct()) follow();
}

// The page of a seat key (`/web?seat=KEY`): join, show the seat's view, follow the game.
async function startSeat(key) {
  document.body.dataset.mode = "seat";
  for (const id of ["episode-panel", "state-panel", "trajectory-panel"]) $(id).hidden = true;
  $("seats-panel").hidden = false;
  $("seat-links").hidden = true;
  const joined = await api("POST", seatPath(key, "join"));
  app.seat = { key, seat: joined.seat ?? null, seats: joined.seats, env: joined.env };
  app.seated = true;
  const described = await api("GET", `/v1/describe?env=${encodeURIComponent(joined.env)}`);
  showInfo(described.info, app.seat.seat);
  const who = app.seat.seat === null ? "a spectator" : `seat ${app.seat.seat}`;
  $("session-where").textContent = who;
  $("seat-line").textContent = app.seat.seat === null
    ? `You watch this game (seats: ${joined.seats.join(", ")}).`
    : `You play ${app.seat.seat} (seats: ${joined.seats.join(", ")}).`;
  document.body.dataset.seat = app.seat.seat ?? "";
  $("action-panel").hidden = app.seat.seat === null;
  $("step-button").textContent = "Play";
  const saving = $("seat-download");
  saving.hidden = false;
  saving.textContent = app.seat.seat === null ? "Download the game (public views)" : "Download my trajectory";
  saving.addEventListener("click", async () => {
    try {
      await downloadTrajectory(key, `${joined.env}-${app.seat.seat ?? "spectator"}.jsonl`);
    } catch (exc) {
      setStatus(`download failed: ${exc.message}`, "error");
    }
  });
  if (app.seat.seat !== null) {
    keepSeat(key, joined.lease, (exc) => {
      app.following += 1;
      app.ended = true;
      setBusy(app.busy);
      setStatus(exc.code === "seat_taken"
        ? "another connection took this seat: this page plays no more"
        : "the game's session is closed: this link plays no more", "error");
    });
  }
  window.addEventListener("pagehide", () => {
    app.following += 1;
    navigator.sendBeacon(seatPath(key, "leave"));
  });
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
  app.keys = null;
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
    if (app.seated) {
      await showSeats();
      follow();
    }
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

// Send the action form's action (or `given`, a board's click, shown in the form first): a
// step, or on a seat's page the seat's move.
async function doStep(event, given) {
  event?.preventDefault();
  if (app.busy) return;
  $("action-error").textContent = "";
  $("raw-error").textContent = "";
  form().clearErrors();
  let action = given;
  if (given === undefined) {
    const read = readAction();
    if (!read.ok) {
      setStatus("fix the action first", "error");
      return;
    }
    action = read.value;
  } else if (app.mode === "raw") {
    $("raw-action").value = JSON.stringify(given, null, 2);
  } else {
    form().setValue(given);
  }
  if (app.seat) {
    await playSeat(action);
    return;
  }
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

// Whether the action has a string field `move`, which a board's clicks fill (chess).
function takesMoves(schema) {
  const top = resolve(schema, schema);
  const move = top && typeof top === "object" ? top.properties?.move : undefined;
  const resolved = move === undefined ? undefined : resolve(move, schema);
  return Boolean(resolved && resolved.type === "string");
}

// The env's description; `seat`: the seat this page plays, whose own types it shows.
function showInfo(info, seat = null) {
  app.info = info;
  const own = (seat !== null && info.seat_schemas?.[seat]) || {};
  info = {
    ...info,
    action_schema: own.action || info.action_schema,
    observation_schema: own.observation || info.observation_schema,
  };
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
  app.moves = takesMoves(info.action_schema || {});
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

function legalMoves() {
  const legal = app.observation?.legal_moves;
  return Array.isArray(legal) ? legal : null;
}

async function start() {
  app.board = new BoardClicks($("render-view"), {
    legal: legalMoves,
    enabled: () => app.moves && canAct() && !app.busy,
    play: (move) => doStep(null, { move }),
  });
  const seatKey = new URLSearchParams(window.location.search).get("seat");
  if (seatKey !== null) {
    $("action-form").addEventListener("submit", doStep);
    $("mode-form").addEventListener("click", () => setMode("form"));
    $("mode-raw").addEventListener("click", () => setMode("raw"));
    setBusy(true);
    setStatus("joining…");
    try {
      await startSeat(seatKey);
    } catch (exc) {
      setStatus(`cannot take this seat: ${exc.code}: ${exc.message}`, "error");
      document.body.dataset.ready = "true";
      return;
    }
    setBusy(false);
    follow();
    document.body.dataset.ready = "true";
    refreshServer();
    setInterval(refreshServer, 2000);
    return;
  }
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
    app.seated = (described.info.seats || []).length > 0;
    if (app.seated) {
      // The owner resets the game and hands out its seats; the seats play, from their links.
      document.body.dataset.mode = "owner";
      $("action-panel").hidden = true;
      $("trajectory-panel").hidden = true;
      $("seat-line").textContent = `Seats: ${described.info.seats.join(", ")}. Each link ` +
        "plays one seat (anyone holding it does): open it in another tab, or hand it to a player.";
    }
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
