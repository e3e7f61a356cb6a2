// Ongrid web console: plain JavaScript, no build step, no network but this daemon.
// Text from the daemon, a model, a tool or a persona file is inserted with textContent;
// only the server's sanitised `html` fields (final / interim / agent_result / assistant
// messages) go through innerHTML.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "ongrid.token";
const TERMINAL = new Set(["completed", "failed", "killed"]);

const COMPOSER_PLACEHOLDER = document.getElementById("text").placeholder;

const state = {
  view: "",            // the view shown (showView)
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  authRequired: false,
  user: null,
  thread: null,        // current thread name
  sessionId: null,     // its coordinator session id
  ws: null,
  wsWanted: false,     // reconnect when it closes
  backoff: 500,
  reconnectTimer: null,
  staleLog: false,     // the log on screen is the last one, kept (dimmed) while reconnecting
  htmlLater: false,    // a live frame's long text came as plain text: reload the transcript at the turn's end
  personasNote: "",    // said on the persona list when it is next shown (after a delete)
  attachGen: 0,        // bumps on every (re)attach; stale async work checks it
  buffering: true,     // frames wait while the transcript loads
  buffer: [],
  running: false,
  pendingHistory: [],  // stored dispatches of a running turn, waiting for their live tiles
  ownTurn: false,  // this page started the running turn (else it attached to it: reload when it ends)
  refreshing: false,  // a transcript refresh runs (refreshAgain: another was asked for meanwhile)
  refreshAgain: false,
  holdFrames: false,   // frames wait while a refreshed log is built aside
  sendLater: [],       // messages sent (Enter) while the log was read again: they go once it is shown
  sendLaterThread: null,  // the thread they were sent on
  unsentNote: "",      // some came back to the composer unsent: the next attach says so again
  sentTexts: [],       // what this page sent during its running turn (a message from elsewhere is not)
  retryMs: 0,          // the wait before reading a log again whose read failed after an attach
  turnEnds: 0,         // turns this page saw end (a thread list read before the last one is stale)
  threadsRead: 0,      // thread list reads asked for (only the last one's answer is shown)
  adopted: false,      // a live tile took the place of a stored dispatch (re-attached mid-turn)
  turn: null,          // live turn: {el, stream, chips}
  tiles: new Map(),    // task_id -> {el, status, started, elapsedEl, stopBtn, resultBox}
  sawLive: false,      // a live frame of a turn arrived since attaching
  lastAssistant: "",   // text of the last assistant answer shown
  lastSeq: 0,          // the highest message seq of the thread this page has read
};

// ---------------------------------------------------------------- helpers
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// The only place server HTML enters the page: fields the daemon rendered and sanitised.
function setServerHtml(node, html) {
  node.innerHTML = typeof html === "string" ? html : "";
}

function banner(text) {
  $("banner-text").textContent = text;
  $("banner").hidden = false;
}
function clearBanner() { $("banner").hidden = true; }

function when(iso) {
  if (!iso) return "";
  const t = new Date(iso);
  if (isNaN(t)) return iso;
  const s = Math.round((Date.now() - t.getTime()) / 1000);
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return t.toLocaleString();
}

// The absolute time as ISO 8601 (UTC), or the value as given when it does not parse.
function isoTime(iso) {
  if (!iso) return "";
  const t = new Date(iso);
  return isNaN(t) ? String(iso) : t.toISOString();
}

// An audit row's time (when the call ended): the absolute ISO time (milliseconds), then how long ago.
function auditTime(iso) {
  if (!iso) return "";
  const abs = isoTime(iso);  // to the millisecond: calls that end within one second keep their order
  const rel = when(iso);
  return rel && rel !== abs ? `${abs} (${rel})` : abs;
}

function fmtElapsed(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
}

class HttpError extends Error {
  constructor(status, body) {
    const msg = (body && body.error && (body.error.message || body.error)) || `HTTP ${status}`;
    super(typeof msg === "string" ? msg : JSON.stringify(msg));
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body, contentType = "application/json", signinOn401 = true) {
  const headers = {};
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = contentType;
    init.body = contentType === "application/json" ? JSON.stringify(body) : body;
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    if (badgeFollowsApi()) setConn(false, "offline");  // no chat socket: the API tells whether the daemon answers
    throw e;
  }
  if (badgeFollowsApi()) setConn(true, upText());
  let data = null;
  try { data = await resp.json(); } catch (_) { data = null; }
  if (resp.status === 401 && state.authRequired && signinOn401) {
    showSignin("Your token was refused; sign in again.");
  }
  if (!resp.ok) throw new HttpError(resp.status, data);
  return data;
}

// ---------------------------------------------------------------- sign-in
// true when signed in; raises HttpError 401 for a refused token
async function checkMe() {
  const me = await api("GET", "/api/me", undefined, "application/json", false);
  state.authRequired = !!me.auth_required;
  state.user = me.user;
  return !!me.user;
}

function showSignin(message) {
  state.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  disconnect();
  showView("signin");
  checkHealth();  // the daemon answers: only the token is missing
  $("signin-error").textContent = message || "";
  $("token").focus();
}

async function onSignin(ev) {
  ev.preventDefault();
  state.token = $("token").value.trim();
  $("signin-error").textContent = "";
  try {
    if (!(await checkMe())) throw new Error("no user");
  } catch (e) {
    state.token = "";
    $("signin-error").textContent = e.status === 401 ? "That token is not valid." : `Sign-in failed: ${e.message}`;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, state.token);
  $("token").value = "";
  afterSignin();
}

function afterSignin() {
  $("who").textContent = state.user ? `user ${state.user}` : "";
  $("signout").hidden = !state.authRequired;
  // the sign-in page's "online" said only that the daemon answers: the view signed into says its own
  // (a chat: once its socket is attached and the transcript shown; a page: with its first API answer)
  setConn(false, "connecting…");
  route();
}

// ---------------------------------------------------------------- views & routing
// The badge says whether the chat socket is attached; on the pages that have none (and never while
// signing in or opening a thread, whose socket is about to connect) it follows the API instead.
function badgeFollowsApi() {
  return !state.wsWanted && ["personas", "persona", "market", "session", "signin"].includes(state.view);
}

// what the badge says when the daemon answers: signed out, that it is up (nothing is attached yet)
function upText() {
  return state.view === "signin" ? "daemon up" : "online";
}

// the badge from /healthz (the pages without a chat socket, the sign-in page among them)
function checkHealth() {
  if (!badgeFollowsApi()) return;
  fetch("/healthz").then((r) => setConn(r.ok, r.ok ? upText() : "offline"), () => setConn(false, "offline"));
}

function showView(name) {
  state.view = name;
  document.body.dataset.view = name;  // the thread-list button (☰, narrow screens) only where the list is
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== `view-${name}`;
  const section = { chat: "chat", session: "chat", personas: "personas", persona: "personas", market: "market" }[name];
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === section) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
}

function parseHash() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map((p) => {
    try { return decodeURIComponent(p); } catch (_) { return p; }
  });
  return parts;
}

function route() {
  if (state.authRequired && !state.user) { showSignin(); return; }
  const [kind, arg] = parseHash();
  if (kind === "t" && arg) { openThread(arg); return; }
  if (kind === "s" && arg) { showView("session"); loadSession(arg); return; }
  if (kind === "personas" && arg) { showView("persona"); loadPersona(arg); return; }
  if (kind === "personas") { showView("personas"); loadPersonas(); return; }
  if (kind === "market") { showView("market"); loadMarket(); return; }
  location.replace(`#/t/${encodeURIComponent(state.thread || "main")}`);
}

// ---------------------------------------------------------------- threads
async function loadThreads() {
  const read = ++state.threadsRead;
  const ends = state.turnEnds;
  const gen = state.attachGen;
  let rows;
  try { rows = await api("GET", "/api/sessions?limit=50"); } catch (e) { return; }
  if (read !== state.threadsRead) return;  // a later read was asked for: its answer is the one shown
  const list = $("threads");
  list.replaceChildren();
  const names = new Set(rows.map((r) => r.thread));
  if (state.thread && !names.has(state.thread)) rows.unshift({ thread: state.thread, updated_at: null });
  for (const r of rows) {
    const a = el("a", { href: `#/t/${encodeURIComponent(r.thread)}`, "data-thread": r.thread,
                        "aria-current": r.thread === state.thread ? "true" : null },
      el("span", { class: "name", text: r.thread, title: r.thread }),
      r.running ? el("span", { class: "running-mark", text: "running" }) : endedMark(r),
      // a thread with nothing in it yet (the one this page just opened) says so: it goes if left empty
      el("span", { class: "when", text: r.updated_at && (r.running || r.last_turn) ? when(r.updated_at) : "new" }),
      r.last_user_text ? el("span", { class: "last", text: r.last_user_text })
        : el("span", { class: "last muted", text: "no messages yet" }));
    a.addEventListener("click", () => toggleSidebar(false));
    list.append(el("li", {}, a));
    // running as of the read: not when a turn ended (or the page attached again) since it was asked for
    if (r.thread === state.thread && r.running && !state.running && ends === state.turnEnds
        && gen === state.attachGen) setRunning(true);
  }
}

// how the thread's last turn ended without an answer, as `ongrid sessions list` says it (its LAST TURN)
function endedMark(r) {
  if (r.last_turn !== "interrupted") return null;
  const why = typeof r.last_turn_error === "string" ? r.last_turn_error : "";
  const kind = !why ? "interrupted" : why.startsWith("stopped:") ? "stopped" : "failed";
  return el("span", { class: `ended-mark ${kind}`, text: kind, title: why || "cut off by a restart" });
}

function toggleSidebar(open) {
  $("sidebar").classList.toggle("open", open);
  $("menu").setAttribute("aria-expanded", open ? "true" : "false");
}

function onNewThread(ev) {
  ev.preventDefault();
  let name = $("newthread-name").value.trim();
  if (!name) {
    const d = new Date();
    const p = (n) => String(n).padStart(2, "0");
    name = `t-${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
  }
  $("newthread-name").value = "";
  location.hash = `#/t/${encodeURIComponent(name.slice(0, 128))}`;
  toggleSidebar(false);
}

function openThread(thread) {
  showView("chat");
  $("thread-title").textContent = thread;
  if (thread === state.thread && state.ws) { loadThreads(); return; }
  state.thread = thread;
  state.sessionId = null;
  $("thread-session").hidden = true;
  resetLog();
  connect();
  loadThreads();
  $("text").focus();
}

// ---------------------------------------------------------------- socket
function disconnect() {
  state.wsWanted = false;
  clearTimeout(state.reconnectTimer);
  if (state.ws) { try { state.ws.close(); } catch (_) { /* closed */ } }
  state.ws = null;
  setConn(false);
}

function setConn(online, text) {
  const c = $("conn");
  c.textContent = text || (online ? "online" : "offline");
  c.classList.toggle("online", online);
}

function connect() {
  disconnect();
  state.wsWanted = true;
  const gen = ++state.attachGen;
  state.buffering = true;
  state.buffer = [];
  // a refresh of the last attach is stale now: its frames and its hold go (a message waiting for it
  // comes back to the composer)
  state.refreshing = false;
  state.refreshAgain = false;
  state.holdFrames = false;
  if (state.sendLater.length) sendWaiting();  // not connected now: back to the composer, said so
  const proto = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(`${proto}${location.host}/ws`);
  state.ws = ws;
  setConn(false, "connecting…");
  ws.addEventListener("open", () => {
    const hello = { type: "hello", thread: state.thread, locale: navigator.language || undefined };
    if (state.token) hello.token = state.token;
    ws.send(JSON.stringify(hello));
  });
  ws.addEventListener("message", (ev) => {
    if (gen !== state.attachGen) return;
    let frame;
    try { frame = JSON.parse(ev.data); } catch (_) { return; }
    if (!frame || typeof frame !== "object") return;
    if (frame.type === "session") { onSession(frame, gen); return; }
    if (state.buffering || state.holdFrames) state.buffer.push(frame); else onFrame(frame);
  });
  ws.addEventListener("close", () => {
    if (gen !== state.attachGen) return;
    state.ws = null;
    setConn(false, state.wsWanted ? "reconnecting…" : "offline");
    // what runs is not known while the daemon cannot be reached (a shutdown stops every turn): the
    // thread list's running marks go until it is read again
    for (const mark of document.querySelectorAll("#threads .running-mark")) mark.remove();
    if (!state.wsWanted) return;
    const delay = state.backoff;
    state.backoff = Math.min(state.backoff * 2, 15000);
    state.reconnectTimer = setTimeout(() => {
      if (state.wsWanted && gen === state.attachGen) reattach();
    }, delay);
  });
}

function reattach() {
  // same thread, fresh socket: the transcript is reloaded from the database once the daemon answers;
  // until then (a restart, a network blip) the last one stays on screen, dimmed
  $("log").classList.add("stale");
  state.staleLog = true;
  connect();
}

async function onSession(frame, gen) {
  state.sessionId = frame.session_id;
  state.backoff = 500;
  setConn(false, "loading…");  // online once the transcript is shown: a message sent before would be shown twice
  clearBanner();
  if (state.unsentNote) { banner(state.unsentNote); state.unsentNote = ""; }
  // the dimmed copy kept while reconnecting stays until the stored one, built aside, takes its place
  if (state.staleLog) resetLog(true);
  const link = $("thread-session");
  link.href = `#/s/${encodeURIComponent(frame.session_id)}`;
  link.hidden = false;
  const fresh = el("div");
  let loaded = false;
  try {
    await loadTranscript(frame.session_id, gen, fresh);
    loaded = true;
  } catch (e) {
    if (gen === state.attachGen) banner(`Could not load the transcript: ${e.message}`);
  }
  if (gen !== state.attachGen) return;
  if (loaded) showLog(fresh);
  else {  // the last copy stays, dimmed, until a read succeeds (a refresh replaces it whole)
    state.retryMs = 0;
    readAgainLater(gen);
  }
  state.buffering = false;
  setConn(true);
  const pending = state.buffer;
  state.buffer = [];
  replayFrames(pending);
  loadThreads();
}

function send(frame) {
  if (!state.ws || state.ws.readyState !== WebSocket.OPEN) {
    banner("Not connected; reconnecting. Try again in a moment.");
    return false;
  }
  if (state.buffering) {  // the transcript is still loading: the turn would show in it and live
    banner("Still loading this conversation; try again in a moment.");
    return false;
  }
  state.ws.send(JSON.stringify(frame));
  return true;
}

// Frames that waited (a transcript read): shown in order, until one of them starts another read (a
// turn that ended): the rest wait again, for that one.
function replayFrames(frames) {
  for (let i = 0; i < frames.length; i++) {
    if (state.buffering || state.holdFrames) { state.buffer.push(...frames.slice(i)); return; }
    onFrame(frames[i]);
  }
}

// ---------------------------------------------------------------- transcript
// keepShown: the log on screen stays (dimmed) until a transcript read aside takes its place
function resetLog(keepShown = false) {
  if (!keepShown) {
    $("log").replaceChildren();
    $("log").classList.remove("stale");
  }
  state.staleLog = false;
  state.turn = null;
  state.tiles.clear();
  state.pendingHistory = [];
  state.adopted = false;
  state.sawLive = false;
  state.ownTurn = false;
  state.lastAssistant = "";
  setRunning(false);
}

// A frame that ends a turn that ran (a final answer; a failure or a stop, whose note the stored log has).
function endsTurn(f) {
  return f.type === "final" || (f.type === "error" && ["stopped", "provider_error", "internal"].includes(f.code));
}

// Render the log again from the database (tiles become their stored results).  The new log is built
// aside and takes the old one's place once it is whole, so the conversation never blanks while it
// loads; live frames wait meanwhile and are shown on the new log, and a message sent meanwhile goes
// once it is shown (so the rows read cannot hold it yet).  One at a time: a refresh asked for while
// one runs (two turns ending in a row) runs once that one is done.  A re-attach (connect) ends it.
async function refreshTranscript() {
  if (state.refreshing) { state.refreshAgain = true; return; }
  const gen = state.attachGen;
  state.refreshing = true;
  state.holdFrames = true;
  try {
    do {
      state.refreshAgain = false;
      const fresh = el("div");
      try {
        await loadTranscript(state.sessionId, gen, fresh);
      } catch (e) {
        if (gen === state.attachGen) banner(`Could not reload the transcript: ${e.message}`);
        if (gen === state.attachGen && $("log").classList.contains("stale")) readAgainLater(gen);
        continue;  // the log shown stays
      }
      if (gen !== state.attachGen) return;  // attached again meanwhile: that attach loads its own
      // workers still running (a read during a turn: a re-attach's read tried again) keep their live
      // tiles, in their stored dispatches' places
      const running = !state.running ? []
        : [...state.tiles.entries()].filter(([, tile]) => !TERMINAL.has(tile.status));
      if (showLog(fresh)) clearBanner();  // a re-attach whose own read failed: its banner goes too
      if (state.turn && !state.turn.el.isConnected) state.turn = null;
      state.tiles.clear();
      state.adopted = false;
      for (const [id, tile] of running) {
        const head = tile.el.querySelector(".tile-head");
        const { drawn, stored } = storedTileOf(id, head.querySelector(".persona").textContent,
          head.querySelector(".desc").textContent);
        const place = drawn || (stored && stored.el);
        if (!place) continue;
        place.replaceWith(tile.el);
        state.tiles.set(id, tile);
      }
      // a turn that ended meanwhile is stored whole (its final comes after its rows; a failed or stopped
      // one has its note): the log is read again rather than its frames replayed onto a log that may
      // hold it already
      const ended = state.buffering ? -1 : state.buffer.map(endsTurn).lastIndexOf(true);
      if (ended >= 0) {
        state.buffer.splice(0, ended + 1);
        state.turn = null;
        state.sawLive = false;
        state.ownTurn = false;
        state.htmlLater = false;
        state.turnEnds += 1;
        setRunning(false);
        loadThreads();
        state.refreshAgain = true;
      }
    } while (state.refreshAgain && gen === state.attachGen);
  } finally {
    if (gen === state.attachGen) {
      state.refreshing = false;
      state.holdFrames = false;
      if (!state.buffering) {
        const held = state.buffer;
        state.buffer = [];
        replayFrames(held);
      }
      // a held frame that began another read: the waiting messages wait for that one
      if (state.sendLater.length && !state.refreshing) sendWaiting();
    }
  }
}

// The log read aside (``fresh``) takes the shown one's place, undimmed, scrolled to its end; true
// when the one it replaced was dimmed (kept from before a re-attach).
function showLog(fresh) {
  const log = $("log");
  const wasStale = log.classList.contains("stale");
  log.replaceChildren(...fresh.childNodes);
  log.classList.remove("stale");
  scrollLog();
  return wasStale;
}

// A re-attach's read failed: the log is read again later — 2 s, then twice as long each time it
// fails again, at most 15 s — unless the page attached again meanwhile.
function readAgainLater(gen) {
  state.retryMs = Math.min(state.retryMs * 2 || 2000, 15000);
  setTimeout(() => { if (gen === state.attachGen) refreshTranscript(); }, state.retryMs);
}

async function interruptedThread(sessionId) {
  // the thread list says whether the thread's last turn ended without an answer (and is not running),
  // and the error it ended with when it left one: its thread row, or null
  try {
    const rows = await api("GET", "/api/sessions?limit=200");
    const row = rows.find((r) => r.id === sessionId);
    return row && row.last_turn === "interrupted" ? row : null;
  } catch (e) {
    return null;
  }
}

function scrollLog() {
  const log = $("log");
  log.scrollTop = log.scrollHeight;
}

async function loadTranscript(sessionId, gen, log = $("log")) {
  let after = 0;
  const rows = [];
  for (let page = 0; page < 20; page++) {  // at most 40,000 messages
    const batch = await api("GET", `/api/sessions/${encodeURIComponent(sessionId)}/messages?after_seq=${after}&limit=2000`);
    if (gen !== state.attachGen) return;
    rows.push(...batch);
    if (batch.length < 2000) break;
    after = batch[batch.length - 1].seq;
  }
  state.lastSeq = rows.reduce((top, m) => (Number.isFinite(m.seq) ? Math.max(top, m.seq) : top), 0);
  const workers = new Map();  // AgentTool call id -> its history tile
  const chipOf = new Map();  // another tool call's id -> its chip, told its outcome by the call's result
  const turns = [];  // each user message's turn, and whether a final answer ended it
  let turn = null;
  for (const m of rows) {
    if (m.role === "user" && m.joined && turn) {
      // sent while the turn ran: that turn answers it, so it is shown inside it, not as a turn of its own
      turn.el.append(el("div", { class: "msg user", text: m.content || "" }));
    } else if (m.role === "user") {
      turn = newTurnEl(m.content || "");
      turns.push(turn);
      log.append(turn.el);
    } else if (m.role === "assistant") {
      if (!turn) { turn = newTurnEl(null); log.append(turn.el); }
      if (m.content) {
        // an answer without tool calls ends its turn: the final answer
        const final = !(m.tool_calls && m.tool_calls.length);
        const bubble = el("div", { class: final ? "msg assistant final md" : "msg assistant md" });
        setServerHtml(bubble, m.html);
        turn.el.append(bubble);
        if (final) turn.answered = true;
        state.lastAssistant = m.content;
      }
      const calls = (m.tool_calls || []).filter((c) => c && c.name);
      let chips = null;
      for (const c of calls) {
        const sent = c.name === "SendMessage" ? (parseJson(c.arguments) || {}).text : null;
        if (c.name === "AgentTool") {
          const tile = historyTile(c);
          turn.el.append(tile.el);
          workers.set(c.id, tile);
          chips = null;
        } else if (typeof sent === "string" && sent.trim()) {
          // an interim message, as it was shown live: the server's sanitised html, else as text
          const html = typeof c.html === "string" && c.html ? c.html : null;
          const bubble = el("div", { class: html ? "msg interim md" : "msg interim" });
          if (html) setServerHtml(bubble, html); else bubble.textContent = sent.trim();
          turn.el.append(bubble);
          chips = null;
        } else {
          if (!chips) { chips = el("div", { class: "chips" }); turn.el.append(chips); }
          const chip = el("span", { class: "chip", text: c.name });
          chips.append(chip);
          if (c.id) chipOf.set(c.id, [chip, String(c.name)]);
        }
      }
    } else if (m.role === "tool" && workers.has(m.tool_call_id)) {
      fillHistoryTile(workers.get(m.tool_call_id), m.content);
    } else if (m.role === "tool" && chipOf.has(m.tool_call_id)) {
      const [chip, name] = chipOf.get(m.tool_call_id);
      showChipOutcome(chip, name, m.content);
    }
  }
  // dispatches without a result yet belong to a turn still running: its live tiles replace them
  state.pendingHistory = [...workers.values()].filter((t) => !t.filled);
  await nestedHistoryTiles(sessionId, [...workers.values()], gen);
  scrollLog();
  // a turn a later one followed without an answer failed, was stopped or was cut off by a restart
  // (the live banner that said so is gone after a reload); the last one only once the daemon says so
  // worded as the live view said it: a stop is no failure ("Stopped — …"), anything else "No answer: code: …"
  const noAnswer = (why) => el("div", { class: "msg noanswer",
    text: !why ? "No answer: this turn failed, was stopped or was cut off by a restart."
      : String(why).startsWith("stopped: ") ? `Stopped — ${String(why).slice(9)}.` : `No answer: ${String(why)}` });
  turns.slice(0, -1).filter((t) => !t.answered).forEach((t) => t.el.append(noAnswer()));
  const last = turns[turns.length - 1];
  const interrupted = last && !last.answered ? await interruptedThread(sessionId) : null;
  if (interrupted && gen === state.attachGen) {
    // the error the turn ended with, as the live view said it (none stored: cut off by a restart)
    last.el.append(noAnswer(interrupted.last_turn_error));
  }
  // again: the notes above came after the first scroll, and the last one is what the reader needs
  if (gen === state.attachGen) scrollLog();
}

// A stored call's chip after a reload says what the live chip said: the daemon's answer for a call
// that did not run or failed is {"status": "error"|"timeout"|"cancelled"|"rejected"|"redirect", …}
function showChipOutcome(chip, name, content) {
  const answer = parseJson(content);
  const status = answer && typeof answer === "object" && !Array.isArray(answer) ? answer.status : null;
  if (!["error", "timeout", "cancelled", "rejected", "redirect"].includes(status)) {
    setChip(chip, name, "ok", null);
    return;
  }
  setChip(chip, name, status, answer.error || answer.message || answer.hint);  // what the live frame carries
}

// A finished call's chip: its name and status, and why when it says (its start on the chip, all of
// it as the chip's title)
function setChip(chip, name, status, why) {
  chip.textContent = `${name} ${status}`;
  chip.className = `chip ${String(status).replace(/[^a-z_]/g, "")}`;
  if (typeof why === "string" && why) {
    chip.textContent += `: ${why.length > 160 ? `${why.slice(0, 160)}…` : why}`;
    chip.title = why;
    chip.classList.add("has-error");
  }
}

function parseJson(text) {
  if (typeof text !== "string" || text.length > 1000000) return null;
  try { return JSON.parse(text); } catch (_) { return null; }
}

// A stored worker dispatch: the tile as it ended, its result as text (the stored
// tool result has no server rendering).
function historyTile(call) {
  const a = parseJson(call.arguments) || {};
  const tile = { statusEl: el("span", { class: "status", text: "dispatched" }), link: el("span"),
                 persona: String(a.subagent_type || "?"), desc: String(a.description || ""), filled: false };
  tile.el = el("div", { class: "tile history" },
    el("div", { class: "tile-head" },
      el("span", { class: "persona", text: String(a.subagent_type || "?") }),
      el("span", { class: "desc", text: String(a.description || "") }), tile.statusEl, tile.link));
  return tile;
}

// What the workers themselves started (the reviewer a worker's change waited for; a worker's own
// workers), read from the session tree and shown under the tile that started it, as live.
async function nestedHistoryTiles(sessionId, tiles, gen) {
  const byTask = new Map(tiles.filter((t) => t.taskId).map((t) => [t.taskId, t]));
  if (!byTask.size) return;
  let tree;
  try {
    tree = await api("GET", `/api/sessions/${encodeURIComponent(sessionId)}/tree`);
  } catch (e) {
    return;  // the transcript stands without them
  }
  if (gen !== state.attachGen || !tree || !Array.isArray(tree.children)) return;
  // depth first: each started session right after the tile of the one that started it (and after
  // what that one started before it); returns the last element placed
  const walk = (node, anchor, depth) => {
    for (const child of Array.isArray(node.children) ? node.children : []) {
      if (!child || typeof child !== "object") continue;
      if (anchor === null) {  // the coordinator's own dispatches: their tiles are in the transcript
        const tile = byTask.get(String(child.id || ""));
        if (tile) {
          const took = storedElapsed(child);
          if (took) tile.statusEl.after(took);
          markEnded(tile.el, child);
          const notMade = notMadeBadge(child.changes_not_made);
          if (notMade) tile.statusEl.after(notMade);
          walk(child, tile.el, 1);
        }
        continue;
      }
      const status = String(child.status || "");
      const nested = el("div", { class: "tile history nested", "data-task": String(child.id || "") },
        el("div", { class: "tile-head" },
          el("span", { class: "persona", text: String(child.agent_id || "?") }),
          el("span", { class: "desc", text: String(child.description || "") }),
          el("span", { class: `status ${status.replace(/[^a-z]/g, "")}`, text: status }),
          child.decision === "approve" || child.decision === "reject"
            ? decisionBadge(el("span"), child.decision) : null,
          notMadeBadge(child.changes_not_made),
          storedElapsed(child),
          el("a", { href: `#/s/${encodeURIComponent(String(child.id || ""))}`, class: "small", text: "audit" })));
      nested.dataset.depth = String(Math.min(depth, 4));
      markEnded(nested, child);
      if (typeof child.decision_reason === "string" && child.decision_reason) {
        // the reviewer's reasons, as its result showed them live (as text)
        nested.append(el("details", { class: "result-box" }, el("summary", { text: `result (${status})` }),
          el("div", { class: "result-body plain", text: child.decision_reason })));
      }
      anchor.after(nested);
      anchor = depth < 8 ? walk(child, nested, depth + 1) : nested;
    }
    return anchor;
  };
  walk(tree, null, 0);
}

// How long a stored worker ran (started → closed), as a live tile shows it; null while it runs (its
// live tile, re-attached, counts) or without the times.
function storedElapsed(node) {
  const from = Date.parse(String(node.started_at || node.created_at || ""));
  const to = Date.parse(String(node.closed_at || ""));
  if (!Number.isFinite(from) || !Number.isFinite(to)) return null;
  return el("span", { class: "elapsed", "aria-label": "elapsed time", text: fmtElapsed(to - from) });
}

// A stored tile's worker end (ms since the epoch, from its tree node's closed_at), for the live tile
// that takes its place after a re-attach: its elapsed time stops there, not when the frame came.
function markEnded(tileEl, node) {
  const to = Date.parse(String(node.closed_at || ""));
  if (Number.isFinite(to)) tileEl.dataset.ended = String(to);
}

function fillHistoryTile(tile, content) {
  tile.filled = true;
  const r = parseJson(content);
  if (r && typeof r === "object" && !r.task_id && r.status === "error") {
    // refused before any worker ran (an unknown persona): no worker, so no tile — the chip it had live
    const chip = el("span", { class: "chip" });
    showChipOutcome(chip, "AgentTool", content);
    tile.el.replaceWith(el("div", { class: "chips" }, chip));
    return;
  }
  if (!r || typeof r !== "object") {
    tile.el.append(el("details", { class: "result-box" }, el("summary", { text: "result" }),
      el("div", { class: "result-body plain", text: String(content || "") })));
    return;
  }
  // a dispatch cut off by a stop: the call is "cancelled", its worker (worker_status) ended "killed"
  const status = String(r.worker_status || r.status || "");
  tile.statusEl.textContent = status;
  tile.statusEl.className = `status ${status.replace(/[^a-z]/g, "")}`;
  if (r.task_id) {
    tile.taskId = String(r.task_id);
    tile.el.dataset.task = tile.taskId;  // a re-attach's live frame for it takes this tile's place
    tile.link.replaceWith(el("a", { href: `#/s/${encodeURIComponent(String(r.task_id))}`, class: "small", text: "audit" }));
  }
  tile.el.append(el("details", { class: "result-box" }, el("summary", { text: `result (${status})` }),
    el("div", { class: "result-body plain", text: String(r.result ?? r.error ?? "") })));
}

function newTurnEl(userText) {
  const node = el("div", { class: "turn" });
  if (userText !== null) node.append(el("div", { class: "msg user", text: userText }));
  return { el: node, stream: null, chips: null, pendingChips: new Map() };
}

function liveTurn() {
  if (!state.turn) {
    state.turn = newTurnEl(null);
    $("log").append(state.turn.el);
  }
  return state.turn;
}

function setRunning(running) {
  state.running = running;
  $("stopturn").disabled = !running;
}

// ---------------------------------------------------------------- live frames
function onFrame(f) {
  if (f.html_later === true) state.htmlLater = true;  // refreshed from the transcript once the turn ends
  switch (f.type) {
    case "token": onToken(f); break;
    case "interim": onInterim(f); break;
    case "tool": onTool(f); break;
    case "agent_tile": onTile(f); break;
    case "agent_result": onResult(f); break;
    case "final": onFinal(f); break;
    case "error": onError(f); break;
    default: break;
  }
  scrollLog();
}

function markLive() {
  state.sawLive = true;
  if (!state.running) setRunning(true);
  dropWorking();
}

// "Working on it…" under a question just sent, until the turn shows anything of its own
function dropWorking() {
  const t = state.turn;
  if (t && t.working) { t.working.remove(); t.working = null; }
}

function onToken(f) {
  markLive();
  const t = liveTurn();
  if (!t.stream) {
    t.stream = el("div", { class: "msg stream" });
    t.el.append(t.stream);
    t.chips = null;
  }
  t.stream.textContent += String(f.text || "");
}

// The coordinator's streamed text ends where a tool call, a tile or a message starts; it streamed as
// plain text, and is shown rendered once the turn has ended (renderStreamed).
function breakStream() {
  const t = liveTurn();
  if (t.stream && t.stream.textContent.trim()) (t.streamed = t.streamed || []).push(t.stream);
  t.stream = null;
  return t;
}

// The turn's texts written before tool calls, rendered: the coordinator's messages stored since the
// last one this page read are read, and each streamed bubble whose text is the same as one of the
// last of them that called tools gets that message's server-rendered html.  Nothing changes when
// they cannot be read or do not match.
// This page's own turn, ended: its stored messages since the last this page read are read; a user
// message among them that this page did not send (another tab's, which joined the turn) means the log
// is read again; else the streamed bubbles are rendered (renderStreamed).
async function settleOwnTurn(bubbles, sent, sessionId, gen) {
  const stored = [];
  const users = [];
  let after = state.lastSeq || 0;
  try {
    for (let page = 0; page < 5; page++) {
      const batch = await api("GET", `/api/sessions/${encodeURIComponent(sessionId)}/messages` +
        `?after_seq=${after}&limit=2000`);
      if (gen !== state.attachGen || !Array.isArray(batch)) return;
      for (const m of batch) {
        if (Number.isFinite(m.seq)) state.lastSeq = Math.max(state.lastSeq || 0, m.seq);
        if (m.role === "user" && Number.isFinite(m.seq)) users.push(String(m.content || ""));
        if (m.role === "assistant" && m.content && typeof m.html === "string" && Array.isArray(m.tool_calls) &&
            m.tool_calls.length) stored.push(m);
      }
      if (batch.length < 2000) break;
      after = state.lastSeq;
    }
  } catch (e) {
    return;  // they stay as streamed
  }
  const left = [...sent];
  const fromElsewhere = users.some((text) => {
    const i = left.indexOf(text);
    if (i >= 0) left.splice(i, 1);
    return i < 0;
  });
  if (fromElsewhere) { refreshTranscript(); return; }
  renderStreamed(bubbles, stored);
}

// The turn's texts written before tool calls, rendered: each streamed bubble whose text is the same
// as one of the last stored messages that called tools gets that message's server-rendered html.
// Nothing changes when they do not match.
function renderStreamed(bubbles, stored) {
  if (!bubbles.length) return;
  const mine = stored.slice(-bubbles.length);
  if (mine.length !== bubbles.length) return;
  bubbles.forEach((bubble, i) => {
    if (bubble.isConnected && bubble.textContent.trim() === String(mine[i].content).trim()) {
      bubble.className = "msg assistant md";  // as the stored transcript shows it (no pre-wrap)
      setServerHtml(bubble, mine[i].html);
    }
  });
}

function onInterim(f) {
  markLive();
  if (typeof f.queue_position === "number") { onQueued(f.queue_position); return; }
  const t = breakStream();
  t.chips = null;
  const bubble = el("div", { class: "msg interim md" });
  setServerHtml(bubble, f.html);
  t.el.append(bubble);
}

// The turn waits for a free slot (limits.max_concurrent_turns / max_turns_per_user): one status
// line, updated in place; position 0 means the turn left the queue and runs now.
function onQueued(position) {
  const t = liveTurn();
  if (position <= 0) {
    if (t.queue) t.queue.remove();
    t.queue = null;
    return;
  }
  if (!t.queue) {
    t.queue = el("div", { class: "msg queued", role: "status" });
    t.el.append(t.queue);
  }
  t.queue.textContent = `Queued — position ${position}. The daemon is running as many turns as it may; ` +
    "this one starts when a slot frees (Stop turn takes it out of the queue).";
}

function onTool(f) {
  // a dispatch shows as its worker's tile; one refused before any worker ran (an unknown persona) has
  // no tile and shows as an error chip, like any other call that did not run
  if (f.name === "AgentTool" && f.dispatched !== false) {
    markLive();
    if (f.status === "started") breakStream();  // what the coordinator wrote before it stays as written
    return;
  }
  markLive();
  const t = breakStream();
  const name = String(f.name || "?");
  const status = String(f.status || "");
  if (status === "started") {
    if (!t.chips) { t.chips = el("div", { class: "chips" }); t.el.append(t.chips); }
    const chip = el("span", { class: "chip", text: `${name} …` });
    t.chips.append(chip);
    if (!t.pendingChips.has(name)) t.pendingChips.set(name, []);
    t.pendingChips.get(name).push(chip);
    return;
  }
  const waiting = t.pendingChips.get(name);
  let chip = waiting && waiting.shift();
  if (!chip) {
    if (!t.chips) { t.chips = el("div", { class: "chips" }); t.el.append(t.chips); }
    chip = el("span", { class: "chip" });
    t.chips.append(chip);
  }
  setChip(chip, name, status, f.error);
}

function onTile(f) {
  markLive();
  const id = String(f.task_id || "");
  let tile = state.tiles.get(id);
  if (!tile) {
    // re-attached: what the reload drew for this worker takes the live tile
    const { drawn, stored } = storedTileOf(id, String(f.subagent_type || "?"), String(f.description || ""));
    const t = breakStream();
    t.chips = null;
    tile = { status: "", started: startedAt(f), ended: null };
    tile.statusEl = el("span", { class: "status" });
    tile.elapsedEl = el("span", { class: "elapsed", "aria-label": "elapsed time" });
    tile.stopBtn = el("button", { type: "button", class: "small danger", "data-stop": id, text: "Stop",
      "aria-label": `Stop ${f.subagent_type || "worker"}`,
      onclick: () => { if (send({ type: "stop", task_id: id })) tile.stopBtn.disabled = true; } });
    tile.el = el("div", { class: "tile", "data-task": id },
      el("div", { class: "tile-head" },
        el("span", { class: "persona", text: String(f.subagent_type || "?") }),
        el("span", { class: "desc", text: String(f.description || "") }),
        tile.statusEl, tile.elapsedEl, tile.stopBtn,
        el("a", { href: `#/s/${encodeURIComponent(id)}`, class: "small", text: "audit" })));
    const parentEl = tileElOf(String(f.parent_task_id || ""));
    if (stored) stored.el.replaceWith(tile.el);
    else if (drawn) {
      tile.el.className = drawn.className.replace("history", "").trim();
      if (drawn.dataset.depth) tile.el.dataset.depth = drawn.dataset.depth;
      // a worker that ended before the reload: its stored result and end stay (no agent_result comes again)
      const ended = Number(drawn.dataset.ended);
      if (Number.isFinite(ended) && ended > 0) tile.ended = ended;
      const box = drawn.querySelector(":scope > .result-box");
      if (box) { tile.resultBox = box; tile.el.append(box); }
      drawn.replaceWith(tile.el);
    } else if (parentEl) {
      // started by a worker (the reviewer its change waits for): under that worker's tile, after what
      // it started before, as after a reload
      const depth = Number(parentEl.dataset.depth || 0);
      tile.el.classList.add("nested");
      tile.el.dataset.depth = String(Math.min(depth + 1, 4));
      let anchor = parentEl;
      for (let next = anchor.nextElementSibling; next && next.classList.contains("nested")
           && Number(next.dataset.depth || 0) > depth; next = next.nextElementSibling) anchor = next;
      anchor.after(tile.el);
    } else t.el.append(tile.el);
    state.tiles.set(id, tile);
  }
  const status = String(f.status || "");
  tile.status = status;
  tile.statusEl.textContent = status;
  tile.statusEl.className = `status ${status.replace(/[^a-z]/g, "")}`;
  if (TERMINAL.has(status)) {
    tile.ended = tile.ended || Date.now();
    tile.stopBtn.disabled = true;
    tile.stopBtn.hidden = true;  // a finished worker has nothing to stop
  }
  if (f.decision === "approve" || f.decision === "reject") {  // a reviewer's, as the gate decided it
    if (!tile.decisionEl) {
      tile.decisionEl = el("span");
      tile.statusEl.after(tile.decisionEl);
    }
    decisionBadge(tile.decisionEl, f.decision);
  }
  const notMade = notMadeBadge(f.changes_not_made);
  if (notMade) {
    if (tile.notMadeEl) tile.notMadeEl.replaceWith(notMade);
    else tile.statusEl.after(notMade);
    tile.notMadeEl = notMade;
  }
  tickTile(tile);
}

// A worker's changes the review gate did not let run (rejected, or refused for a read-only
// persona): a completed worker must not read as one that changed what it set out to; null if none.
function notMadeBadge(count) {
  const n = Number.isInteger(count) && count > 0 ? count : 0;
  if (!n) return null;
  return el("span", { class: "not-made", text: `${n} change${n === 1 ? "" : "s"} not made`,
                      title: "the review gate rejected or refused these changes: they did not run" });
}

// The element of worker ``id``'s tile: live, or drawn from the stored tree after a reload; null.
function tileElOf(id) {
  if (!id) return null;
  const live = state.tiles.get(id);
  if (live) return live.el;
  return $("log").querySelector(`.tile[data-task="${CSS.escape(id)}"]`);
}

// The review gate's decision on a reviewer's answer (from the server, not the answer's text).
function decisionBadge(node, decision) {
  node.className = `decision decision-${decision}`;
  node.textContent = decision;
  node.title = decision === "approve" ? "the gate approved the change: it ran" : "the gate rejected the change: it did not run";
  return node;
}

// Re-attached to a running turn: the stored dispatch this live tile stands for, whose
// turn becomes the live one (so the final answer lands after its tiles); null if none.
// Re-attached: what a reload drew for worker ``id`` that its live tile takes over — ``drawn``, the stored
// tile of that task id (a worker that ended, or one a worker started), else ``stored``, a stored
// dispatch of the same persona and description still waiting for its live tile (adopted); null each.
function storedTileOf(id, persona, desc) {
  const drawn = tileElOf(id);
  return { drawn, stored: drawn ? null : adoptStoredDispatch(persona, desc) };
}

function adoptStoredDispatch(persona, desc) {
  const list = state.pendingHistory || [];
  const i = list.findIndex((h) => h.persona === persona && h.desc === desc);
  if (i < 0) return null;
  const [stored] = list.splice(i, 1);
  state.adopted = true;
  const turnEl = stored.el.closest(".turn");
  if (!state.turn && turnEl) state.turn = { el: turnEl, stream: null, chips: null, pendingChips: new Map() };
  return stored;
}

// When the worker started: the frame's started_at (so a reload or re-attach shows its true elapsed
// time), never later than now (a browser clock behind the server's); now when the frame has none.
function startedAt(f) {
  const at = Date.parse(String(f.started_at || ""));
  return Number.isFinite(at) ? Math.min(at, Date.now()) : Date.now();
}

function tickTile(tile) {
  tile.elapsedEl.textContent = fmtElapsed((tile.ended || Date.now()) - tile.started);
}

function onResult(f) {
  markLive();
  const id = String(f.task_id || "");
  let tile = state.tiles.get(id);
  if (!tile) { onTile({ task_id: id, subagent_type: "worker", description: "", status: f.status }); tile = state.tiles.get(id); }
  if (tile.resultBox) tile.resultBox.remove();
  let body;
  if (typeof f.html === "string") {
    body = el("div", { class: "md result-body" });
    setServerHtml(body, f.html);
  } else {  // no rendered HTML: the plain text, line breaks kept (.result-body.plain is pre-wrap)
    body = el("div", { class: "result-body plain", text: String(f.text ?? f.result ?? "") });
  }
  tile.resultBox = el("details", { open: true, class: "result-box" },
    el("summary", { text: `result (${String(f.status || "")})` }), body);
  tile.el.append(tile.resultBox);
  if (TERMINAL.has(String(f.status))) {
    tile.ended = tile.ended || Date.now();
    tile.stopBtn.disabled = true;
    tile.stopBtn.hidden = true;
    tickTile(tile);
  }
  breakStream();
}

function onFinal(f) {
  // a re-attached client gets the final of a turn that ended while it was away;
  // it is already in the transcript just loaded
  if (!state.sawLive && state.lastAssistant && f.text === state.lastAssistant) { endTurn(); return; }
  const t = liveTurn();
  let bubble = t.stream;
  if (!bubble) { bubble = el("div"); t.el.append(bubble); }
  bubble.className = "msg final md";
  setServerHtml(bubble, f.html);
  state.lastAssistant = String(f.text || "");
  endTurn();
}

function onError(f) {
  const code = String(f.code || "error");
  if (code === "busy") {
    // nothing ran and nothing was stored: say so under the message, which the user may send again
    banner(`Busy: ${String(f.message || "")}`);
    const t = liveTurn();
    if (t.queue) { t.queue.remove(); t.queue = null; }
    t.el.append(el("div", { class: "msg busy", role: "status",
      text: "Not sent — the daemon is busy (every slot runs and the queue is full). Nothing was stored; " +
        "send it again in a moment." }));
    endTurn();
    return;
  }
  if (["stopped", "provider_error", "internal"].includes(code)) {
    // the turn ended without an answer: said under its message (as a reload shows it), not only in the banner
    const t = state.turn;
    const waited = !!(t && t.queue);  // stopped while it waited for a slot: it never ran, nothing was stored
    if (t && t.queue) { t.queue.remove(); t.queue = null; }
    const note = code === "stopped" && waited
      ? "Not sent — stopped while it waited in the queue. Nothing was stored; send it again to ask it."
      : code === "stopped" ? `Stopped — ${String(f.message || "")}.`  // a stop is no failure: no red banner
        : `No answer: ${code}: ${String(f.message || "")}`;
    // the reason once, under the message; the banner only points at it (without a turn it says it all)
    if (!t) banner(`${code}: ${String(f.message || "")}`);
    else if (code !== "stopped") banner(`The turn ended without an answer (${code}); the reason is under your message.`);
    if (t) t.el.append(el("div", { class: "msg noanswer", role: "status", text: note }));
    endTurn();
    return;
  }
  banner(`${code}: ${String(f.message || "")}`);
}

function endTurn() {
  state.turnEnds += 1;
  dropWorking();
  setRunning(false);
  // re-attached mid-turn: stored dispatches whose live tiles never came are stale now (or adopted:
  // their results went out while this page was away), and messages sent before the reload that
  // joined the turn were stored only as it went on; and a long text went out as plain text
  // (html_later), which the stored transcript has rendered: the transcript is read again
  if (state.htmlLater || state.adopted || (state.pendingHistory || []).length || !state.ownTurn) refreshTranscript();
  else settleOwnTurn((state.turn && state.turn.streamed) || [], state.sentTexts, state.sessionId, state.attachGen);
  state.htmlLater = false;
  state.ownTurn = false;
  for (const tile of state.tiles.values()) {
    if (!TERMINAL.has(tile.status)) tile.stopBtn.disabled = true;
  }
  state.turn = null;
  state.sawLive = false;
  loadThreads();
}

setInterval(() => {
  for (const tile of state.tiles.values()) if (!tile.ended) tickTile(tile);
}, 500);
setInterval(() => { if (!$("view-chat").hidden && state.sessionId) loadThreads(); }, 15000);
// no chat socket on this page: the badge follows whether the daemon answers, not only the last API call
setInterval(checkHealth, 10000);

// ---------------------------------------------------------------- composer
function onSend(ev) {
  if (ev) ev.preventDefault();
  const box = $("text");
  const text = box.value;
  if (!text.trim()) return;
  if (state.refreshing) {
    // the log is being read again: the text as it is now goes once the log is shown (the frames of a
    // turn that started meanwhile are shown first, so it joins that turn as it will on the daemon)
    state.sendLater.push(text);
    state.sendLaterThread = state.thread;
    box.value = "";
    box.placeholder = "Sending once the conversation has loaded…";
    return;
  }
  if (sendText(text)) box.value = "";
}

// The messages sent while the log was read again, now that it is shown: each goes, or comes back to
// the composer (before what is typed there) with a banner saying it was not sent.
function sendWaiting() {
  const waiting = state.sendLater;
  state.sendLater = [];
  $("text").placeholder = COMPOSER_PLACEHOLDER;
  const unsent = waiting.filter((text) => !sendText(text));
  if (!unsent.length) return;
  const box = $("text");
  box.value = [...unsent, ...(box.value ? [box.value] : [])].join("\n");
  // said again once attached (attaching clears the banner); named, as the thread may be another now
  state.unsentNote = `Not sent to “${state.sendLaterThread}” — the connection changed while the conversation ` +
    "loaded; your message is back in the box.";
  banner(state.unsentNote);
}

// Send ``text`` as the user's message and show it (a new turn, or a message joining the running one);
// false when it could not be sent (not connected, still loading: the banner says so).
function sendText(text) {
  if (!send({ type: "user_message", text })) return false;
  clearBanner();
  if (!state.running) {
    state.turn = newTurnEl(text);
    state.turn.working = el("div", { class: "msg working", role: "status", text: "Working on it…" });
    state.turn.el.append(state.turn.working);
    $("log").append(state.turn.el);
    state.tiles.clear();
    state.ownTurn = true;
    state.sentTexts = [text];
  } else {
    // an interjection during a running turn
    liveTurn().el.append(el("div", { class: "msg user", text }));
    state.sentTexts.push(text);
    breakStream();
  }
  state.sawLive = true;
  setRunning(true);
  scrollLog();
  setTimeout(loadThreads, 500);  // the running marker and the new last message
  return true;
}

function onKey(ev) {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); onSend(); }
}

// ---------------------------------------------------------------- session view
// the session's whole tree — its sessions, messages, tool calls and reviews — as `ongrid sessions
// export` writes it (GET /api/sessions/{id}/export), saved as a file by the browser
async function onSessionExport() {
  const id = $("session-id").textContent;
  const out = $("session-export-result");
  out.textContent = "exporting…";
  try {
    const data = await api("GET", `/api/sessions/${encodeURIComponent(id)}/export`);
    const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: "application/json" }));
    const a = el("a", { href: url, download: `ongrid-session-${id}.json` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    out.textContent = "";
  } catch (e) {
    out.textContent = `Not exported: ${e.message}`;
  }
}

async function loadSession(id) {
  $("session-id").textContent = id;
  $("session-export-result").textContent = "";
  $("session-back").href = `#/t/${encodeURIComponent(state.thread || "main")}`;
  const treeBox = $("session-tree");
  const tbody = $("audit").querySelector("tbody");
  treeBox.replaceChildren(el("p", { text: "loading…" }));
  tbody.replaceChildren();
  $("audit-empty").hidden = true;
  $("audit").hidden = true;  // no table header under an error: shown once the audit has loaded
  $("session-worker").hidden = true;  // a worker's brief and report: shown once read
  let tree, audit;
  try {
    [tree, audit] = await Promise.all([
      api("GET", `/api/sessions/${encodeURIComponent(id)}/tree`),
      api("GET", `/api/sessions/${encodeURIComponent(id)}/audit`)]);
  } catch (e) {
    treeBox.replaceChildren(el("p", { class: "error", text: `Could not load the session: ${e.message}` }));
    return;
  }
  if (typeof tree.thread_id === "string" && tree.thread_id) {  // after a reload state.thread is not this one
    $("session-back").href = `#/t/${encodeURIComponent(tree.thread_id)}`;
  }
  treeBox.replaceChildren(el("ul", { class: "tree" }, treeNode(tree, 0)));
  $("audit-empty").hidden = audit.length > 0;
  $("audit").hidden = false;
  for (const r of audit) tbody.append(auditRow(r));
  if (tree.parent_session_id) await loadBriefAndReport(id, tree);
}

// A worker's session: the brief it was given (its first user message) and its report (its last
// assistant text that called no tool), read from its stored messages, page by page.
const BRIEF_PAGE = 500;
const BRIEF_MAX_PAGES = 20;
async function loadBriefAndReport(id, tree) {
  const box = $("session-worker"), brief = $("session-brief"), report = $("session-report");
  let first = null, last = null, afterSeq = 0;
  try {
    for (let page = 0; page < BRIEF_MAX_PAGES; page++) {
      const rows = await api("GET", `/api/sessions/${encodeURIComponent(id)}/messages` +
        `?after_seq=${afterSeq}&limit=${BRIEF_PAGE}`);
      if (!Array.isArray(rows)) break;
      for (const m of rows) {
        if (!first && m.role === "user") first = m;
        if (m.role === "assistant" && m.content && !(Array.isArray(m.tool_calls) && m.tool_calls.length)) last = m;
      }
      const seqs = rows.map((m) => Number(m.seq)).filter(Number.isFinite);
      if (rows.length < BRIEF_PAGE || !seqs.length) break;
      afterSeq = Math.max(...seqs);
    }
  } catch (e) {
    if ($("session-id").textContent !== id) return;
    box.hidden = false;
    brief.replaceChildren(el("span", { class: "error", text: `Could not load its messages: ${e.message}` }));
    report.replaceChildren();
    return;
  }
  if ($("session-id").textContent !== id) return;  // another session was opened meanwhile
  box.hidden = false;
  brief.textContent = first ? String(first.content || "") : "(no brief stored)";
  report.classList.toggle("noanswer", !last);
  if (last && typeof last.html === "string" && last.html) setServerHtml(report, last.html);
  else if (last) report.textContent = String(last.content);
  else {
    const why = tree.close_reason ? `: ${tree.close_reason}` : "";
    report.textContent = TERMINAL.has(String(tree.status))
      ? `No report — the worker ended ${tree.status}${why}.`
      : `No report yet — the worker is ${tree.status}.`;
  }
}

// "2300 tokens in (600 cached) / 120 out · 2 model calls"; "" without model calls
function tokensText(t) {
  if (!t || !Number(t.model_calls)) return "";
  const cached = Number(t.cached) ? ` (${Number(t.cached)} cached)` : "";
  const calls = Number(t.model_calls);
  return `${Number(t.prompt) || 0} tokens in${cached} / ${Number(t.completion) || 0} out · ` +
    `${calls} model call${calls === 1 ? "" : "s"}`;
}

function treeNode(n, depth) {
  const li = el("li", {},
    el("span", { class: "node" },
      el("a", { href: `#/s/${encodeURIComponent(n.id)}`, class: "persona", text: String(n.agent_id) }),
      el("span", { class: `status ${String(n.status).replace(/[^a-z]/g, "")}`, text: String(n.status) }),
      n.decision === "approve" || n.decision === "reject" ? decisionBadge(el("span"), n.decision) : null,
      notMadeBadge(n.changes_not_made),
      n.close_reason ? el("span", { class: "meta", text: `(${n.close_reason})` }) : null,
      n.description ? el("span", { text: String(n.description) }) : null,
      n.closed_at ? el("span", { class: "meta", text: `closed ${when(n.closed_at)}` }) : null,
      tokensText(n.tokens) ? el("span", { class: "meta tokens", text: tokensText(n.tokens) }) : null,
      el("code", { class: "meta", text: String(n.id) })));
  if (depth < 32 && Array.isArray(n.children) && n.children.length) {
    const ul = el("ul");
    for (const c of n.children) ul.append(treeNode(c, depth + 1));
    li.append(ul);
  }
  return li;
}

// A tool's JSON result one field a line, a text value as its own lines (a command's output reads
// as it printed it, not as an escaped string); anything else as stored. Shown as text, never HTML.
function laidOutResult(text) {
  if (!text.startsWith("{") || text.length > 1000000) return text;
  let value;
  try { value = JSON.parse(text); } catch { return text; }
  if (!value || typeof value !== "object" || Array.isArray(value)) return text;
  const lines = [];
  for (const [key, item] of Object.entries(value)) {
    if (typeof item === "string") {
      const t = item.endsWith("\n") ? item.slice(0, -1) : item;
      if (t.includes("\n")) { lines.push(`${key}:`); for (const l of t.split("\n")) lines.push("  " + l); }
      else lines.push(t ? `${key}: ${t}` : `${key}:`);
    } else lines.push(`${key}: ${JSON.stringify(item)}`);
  }
  return lines.join("\n");
}

// "exit N" for a command's result that exited non-zero (an answer, audited ok, not to be missed)
function exitNote(text) {
  if (!text.startsWith("{") || !text.includes('"exit_code"') || text.length > 1000000) return "";
  let code;
  try { code = JSON.parse(text).exit_code; } catch { return ""; }
  return Number.isInteger(code) && code !== 0 ? `exit ${code}` : "";
}

function auditRow(r) {
  const stored = String(r.result || "");
  const result = laidOutResult(stored);
  const exited = exitNote(stored);
  const p = r.proposal;
  let review = el("span", { class: "meta", text: "—" });
  if (p) {
    review = el("div", { class: "proposal" },
      el("span", { class: `decision-${String(p.decision || "").replace(/[^a-z]/g, "")}`, text: p.decision || "undecided" }),
      p.decision_reason ? el("pre", { class: "reason", text: String(p.decision_reason) }) : null,
      p.reviewer_session_id ? el("a", { href: `#/s/${encodeURIComponent(p.reviewer_session_id)}`, text: "reviewer" }) : null);
  }
  return el("tr", { "data-tool": r.tool_name, "data-status": r.status },
    el("td", { class: "when", "data-label": "ended", title: isoTime(r.created_at), text: auditTime(r.created_at) }),
    el("td", { "data-label": "agent", text: String(r.agent_id || "") }),
    el("td", { "data-label": "tool" }, el("code", { text: String(r.tool_name) })),
    el("td", { "data-label": "status" }, String(r.status),
      exited ? el("span", { class: "exit-nonzero", text: ` · ${exited}` }) : null),
    el("td", { "data-label": "ms", text: String(r.duration_ms) }),
    el("td", { "data-label": "arguments" }, el("pre", { text: String(r.arguments || "") })),
    el("td", { "data-label": "result" }, result.length > 300
      ? el("details", {}, el("summary", { text: result.slice(0, 120) + "…" }), el("pre", { text: result }))
      : el("pre", { text: result })),
    el("td", { "data-label": "review" }, review));
}

// ---------------------------------------------------------------- personas
function originOf(p) {
  // builtin | user | plugin:<name> from the daemon; the file path when it does not say
  return String(p.origin || p.source || "?");
}

// GET a list into a table body: "loading…", then the rows, or the error in one cell.
// Returns [tbody, rows] (rows null on an error).
async function fetchTable(tableId, path) {
  const tbody = $(tableId).querySelector("tbody");
  const cols = $(tableId).querySelectorAll("thead th").length;
  tbody.replaceChildren(el("tr", {}, el("td", { colspan: cols, text: "loading…" })));
  try {
    const rows = await api("GET", path);
    tbody.replaceChildren();
    return [tbody, Array.isArray(rows) ? rows : []];
  } catch (e) {
    tbody.replaceChildren(el("tr", {}, el("td", { colspan: cols, class: "error", text: e.message })));
    return [tbody, null];
  }
}

async function loadPersonas() {
  const note = $("personas-result");  // what the last action said (a delete that left nothing of the persona)
  note.textContent = state.personasNote || "";
  note.className = state.personasNote ? "result good" : "result";
  state.personasNote = "";
  loadSkippedFiles();
  const [tbody, rows] = await fetchTable("personas", "/api/agents");
  if (!rows) return;
  for (const p of rows) {
    const warnings = Array.isArray(p.warnings) ? p.warnings : [];
    tbody.append(el("tr", { "data-persona": p.name },
      el("td", { "data-label": "" }, el("a", { href: `#/personas/${encodeURIComponent(p.name)}`, text: p.name })),
      el("td", { "data-label": "origin", text: originOf(p) }),
      el("td", { "data-label": "description", text: String(p.description || "") }),
      el("td", { "data-label": warnings.length ? "warnings" : "" },
        warnings.length ? el("ul", { class: "warnings" }, ...warnings.map((w) => el("li", { text: String(w) }))) : "")));
  }
}

// a skipped file's warning without the path said just above it: "line 3: …", or what follows the path
function skippedWhy(path, warning) {
  const w = String(warning);
  if (!w.startsWith(`${path}:`)) return w;
  const rest = w.slice(String(path).length + 1).trim();
  return /^\d+:/.test(rest) ? `line ${rest}` : rest;
}

// the agents folders' files that gave no persona (broken YAML, no name, a duplicate), with why:
// a file dropped into a folder that never shows up in the list says so here
async function loadSkippedFiles() {
  const box = $("personas-skipped");
  let files = [];
  try { files = await api("GET", "/api/agents-skipped"); } catch (_) { files = []; }
  files = Array.isArray(files) ? files : [];
  box.hidden = !files.length;
  box.replaceChildren(...(files.length ? [
    el("div", { text: `${files.length} file${files.length === 1 ? "" : "s"} in the agents folders gave no persona:` }),
    el("ul", { class: "warnings" }, ...files.map((f) => el("li", {},
      el("code", { text: String(f.path) }),
      el("ul", {}, ...(Array.isArray(f.warnings) ? f.warnings : []).map((w) => el("li", { text: skippedWhy(f.path, w) })))))),
  ] : []));
}

// "New persona": opens the form for a name (an empty one for a new name, the persona itself for a taken one);
// the name is checked here as the daemon checks it (letters, digits, '-', '_'), so a typo is said at once
function personaNameProblem(name) {
  return !name ? "type a name first" : name.length > 128 ? "at most 128 characters"
    : !/^[\p{L}\p{N}_-][\p{L}\p{N}\p{M}_-]*$/u.test(name) || /[_-]\p{M}/u.test(name)
      ? "only letters, digits, '-' and '_'" : "";
}

function onPersonaNew(ev) {
  ev.preventDefault();
  const name = $("persona-new-name").value.trim().normalize("NFC");
  const bad = personaNameProblem(name);
  $("persona-new-error").textContent = bad;
  if (bad) return;
  $("persona-new-name").value = "";
  location.hash = `#/personas/${encodeURIComponent(name)}`;
}

function personaFile(p) {
  // The persona's front matter rebuilt from its fields (JSON values are valid YAML).
  const keys = ["name", "description", "when_to_use", "tools", "disallowed_tools", "permission_mode", "max_turns",
                "tool_budget", "critical_reminder", "skills", "model"];
  const lines = ["---"];
  for (const k of keys) {
    const v = p[k];
    if (v === null || v === undefined || (Array.isArray(v) && !v.length)) continue;
    lines.push(`${k}: ${JSON.stringify(v)}`);
  }
  if (p.metadata && Object.keys(p.metadata).length) lines.push(`metadata: ${JSON.stringify(p.metadata)}`);
  lines.push("---");
  return lines.join("\n") + "\n" + String(p.body || "");
}

async function loadPersona(name) {
  $("persona-name").textContent = name;
  $("persona-result").textContent = "";
  $("persona-result").className = "result";
  $("persona-warnings").replaceChildren();
  $("persona-body").value = "";
  $("persona-body").readOnly = false;
  $("persona-save").hidden = false;
  $("persona-delete").hidden = true;
  try {
    const p = await api("GET", `/api/agents/${encodeURIComponent(name)}`);
    showPersonaOrigin(p);
    $("persona-body").value = typeof p.text === "string" ? p.text : personaFile(p);
    showWarnings(p.warnings);
    if (typeof p.read_only === "string" && p.read_only) {  // shown, not editable here (the server says why)
      $("persona-body").readOnly = true;
      $("persona-save").hidden = true;
      $("persona-result").textContent = p.read_only;
    }
  } catch (e) {
    const bad = e.status === 404 ? personaNameProblem(name.normalize("NFC")) : "";
    if (bad) {  // a name typed into the address bar the daemon would refuse: said now, not on Save
      $("persona-meta").textContent = "";
      $("persona-result").textContent = `No persona can be called that: ${bad}.`;
      $("persona-result").className = "result bad";
      $("persona-save").hidden = true;
    } else if (e.status === 404) {
      $("persona-meta").textContent = "new persona (not saved yet)";
      $("persona-body").value = `---\nname: ${JSON.stringify(name)}\ndescription: "What this agent does"\n`
        + "when_to_use: \"When the coordinator should dispatch it\"\n"
        + "# the tools it may call: `ongrid agents show specialist-disk` or the built-in personas list them\n"
        + "tools: [host_du_summary, search_logs]\n---\nYou are …\n";
    } else {
      $("persona-result").textContent = e.message;
      $("persona-result").className = "result bad";
    }
  }
}

function showPersonaOrigin(p) {
  $("persona-meta").textContent = `${originOf(p)} · ${p.source || ""}`;
  $("persona-delete").hidden = p.origin !== "user";  // built-in and plugin personas cannot be deleted here
}

function showWarnings(list) {
  const ul = $("persona-warnings");
  ul.replaceChildren(...(Array.isArray(list) ? list : []).map((w) => el("li", { text: String(w) })));
}

async function onPersonaSave(ev) {
  ev.preventDefault();
  const name = $("persona-name").textContent;
  const out = $("persona-result");
  out.textContent = "saving…";
  out.className = "result";
  try {
    const p = await api("PUT", `/api/agents/${encodeURIComponent(name)}`, $("persona-body").value, "text/markdown");
    out.textContent = `Saved ${p.name}.`;
    out.className = "result good";
    showPersonaOrigin({ origin: "user", ...p });  // a saved file is a user agent, in the file it was saved to
    showWarnings(p.warnings);
  } catch (e) {
    out.textContent = `Not saved: ${e.message}`;
    out.className = "result bad";
    // the warnings box lists what else is worth knowing, not the refusal the line above says
    showWarnings(((e.body && e.body.warnings) || []).filter((w) => !String(e.message).includes(String(w))));
  }
}

async function onPersonaDelete() {
  const name = $("persona-name").textContent;
  if (!confirm(`Delete the user agent ${name}?`)) return;
  const out = $("persona-result");
  try {
    const r = await api("DELETE", `/api/agents/${encodeURIComponent(name)}`);
    const said = r.restored_builtin ? `Deleted; the built-in ${name} is back.`
      : r.now_from ? `Deleted that file; ${name} is still defined by ${String(r.now_from)}.` : `Deleted ${name}.`;
    if (!r.restored_builtin && !r.now_from) {  // nothing defines it any more: back to the list, which says so
      state.personasNote = said;
      location.hash = "#/personas";
      return;
    }
    await loadPersona(name);  // what defines it now (the built-in, or another file)
    if ($("persona-name").textContent !== name || out.className === "result bad") return;  // moved on; or
    out.textContent = said;                                        // what defines it now could not be read
    out.className = "result good";
  } catch (e) {
    out.textContent = `Not deleted: ${e.message}`;
    out.className = "result bad";
  }
}

// ---------------------------------------------------------------- marketplace
async function loadMarket() {
  const [tbody, rows] = await fetchTable("market", "/api/marketplace");
  if (!rows) return;
  for (const r of rows) {
    const action = r.installed ? "uninstall" : "install";
    const btn = el("button", { type: "button", class: r.installed ? "small danger" : "small", "data-action": action,
      text: r.installed ? "Uninstall" : "Install" });
    btn.addEventListener("click", () => marketAction(action, r.name, btn));
    tbody.append(el("tr", { "data-package": r.name },
      el("td", { "data-label": "name", text: r.name }),
      el("td", { "data-label": "version", text: marketVersion(r) }),
      el("td", { "data-label": "description", text: String(r.description || "") }),
      el("td", { "data-label": "installed", class: "installed", text: r.installed ? "yes" : "no" }),
      el("td", { "data-label": "", class: "action" }, btn)));
  }
}

// the installed version, and the index's when it offers another (uninstall, then install, to take it)
function marketVersion(r) {
  const have = r.installed ? r.installed_version : null;
  if (have && r.version && have !== r.version) return `${have} (the index offers ${r.version})`;
  return String(have || r.version || "");
}

async function marketAction(action, name, btn) {
  // an uninstall takes the package's tools and personas away from everyone at once: asked first, like a delete
  if (action === "uninstall" && !confirm(`Uninstall ${name}? Its tools and personas leave the running daemon.`)) return;
  const out = $("market-result");
  btn.disabled = true;
  out.className = "result";
  out.textContent = `${action === "install" ? "Installing" : "Uninstalling"} ${name}…`;
  try {
    const r = await api("POST", `/api/marketplace/${action}`, { name });
    const warn = Array.isArray(r.warnings) && r.warnings.length ? `\nwarnings: ${r.warnings.join("; ")}` : "";
    // what the install added, as the CLI says it (persona and skill folders by their last name)
    const added = Object.entries(r.registered && typeof r.registered === "object" ? r.registered : {})
      .filter(([, names]) => Array.isArray(names) && names.length)
      .map(([kind, names]) => `\n${kind.replace(/_/g, " ")}: ${names.map((n) => (kind === "personas" || kind === "skills"
        ? String(n).replace(/\/+$/, "").split("/").pop() : String(n))).join(", ")}`).join("");
    out.textContent = `${name}: ${r.action || action + "ed"}${r.version ? " " + r.version : ""}${added}${warn}`;
    out.className = "result good";
  } catch (e) {
    out.textContent = `${name}: ${action} failed: ${e.message}`;
    out.className = "result bad";
  }
  await loadMarket();
}

// ---------------------------------------------------------------- start
function init() {
  $("signin").addEventListener("submit", onSignin);
  $("signout").addEventListener("click", () => showSignin("Signed out."));
  $("banner-close").addEventListener("click", clearBanner);
  $("composer").addEventListener("submit", onSend);
  $("text").addEventListener("keydown", onKey);
  $("stopturn").addEventListener("click", () => send({ type: "stop" }));
  $("newthread").addEventListener("submit", onNewThread);
  $("menu").addEventListener("click", () => toggleSidebar(!$("sidebar").classList.contains("open")));
  $("persona-form").addEventListener("submit", onPersonaSave);
  $("persona-new").addEventListener("submit", onPersonaNew);
  $("session-export").addEventListener("click", onSessionExport);
  $("persona-new-name").addEventListener("input", () => {  // said as you type, gone once it is right
    const name = $("persona-new-name").value.trim().normalize("NFC");
    $("persona-new-error").textContent = name ? personaNameProblem(name) : "";
  });
  $("persona-delete").addEventListener("click", onPersonaDelete);
  window.addEventListener("hashchange", route);
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && $("sidebar").classList.contains("open")) { toggleSidebar(false); $("menu").focus(); }
  });
  const threadLink = document.querySelector('[data-nav="chat"]');
  threadLink.addEventListener("click", (ev) => {
    ev.preventDefault();
    location.hash = `#/t/${encodeURIComponent(state.thread || "main")}`;
  });
  checkMe().then((ok) => {
    if (state.authRequired && !ok) showSignin("");
    else afterSignin();
  }).catch((e) => {
    if (e.status === 401) { state.authRequired = true; showSignin("Your token was refused; sign in again."); }
    else banner(`The daemon did not answer: ${e.message}`);
  });
}

document.addEventListener("DOMContentLoaded", init);
