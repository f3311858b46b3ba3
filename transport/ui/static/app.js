// The page: the token, the sessions list, the open session's stream, the composer.

import { ApiError, Unauthorized, api, path, takeTokenFromFragment, textPrompt, token } from "./api.js";
import { el, short } from "./dom.js";
import { BackgroundTasks, Checkpoints, PendingPrompts, Permissions, RecentSet, SubagentRuns, Work } from "./panels.js";
import { SessionStream } from "./stream.js";
import { Conversation } from "./view.js";

const SESSIONS_EVERY_MS = 2000;
const RUNS_EVERY_MS = 1000;
const TICK_MS = 500; // the running turn's elapsed time
const DRAFT = "trellis.draft."; // + session id: the composer's text, kept for the tab
const NARROW = "(max-width: 700px)";

const $ = (id) => document.getElementById(id);

const state = {
  sessionId: null,
  stream: null,
  sessions: [],
  timers: [],
  started: false, // the app was shown once: a later login keeps it on screen
  renaming: null, // the session whose title is being edited in the list
  caps: null,
  model: null, // the open session's own model (status `model`: set by /model), else
  // Sessions this page closed, deletes or saw closed: nothing more is read of them (their routes answer 404).
  // The turn a close cancels ends first, and its end would ask for the status and the checkpoints.
  closed: new RecentSet(),
};

const openId = () => state.sessionId;
const readableId = () => (state.closed.has(state.sessionId) ? null : state.sessionId);
const jumpButton = $("jump");
const conversation = new Conversation($("conversation"), (following) => { jumpButton.hidden = following; },
  (entry) => openRewind(entry));
const work = new Work(() => {
  updateComposer();
  turn.running(work.running !== null);
  refreshSessions(); // the list shows each session's state: this one's just changed
});
const pending = new PendingPrompts($("pending"), openId);
const tasks = new BackgroundTasks($("tasks"), openId);
const permissions = new Permissions($("permissions"), openId);
const runs = new SubagentRuns($("runs"), (sessionId) => openSession(sessionId));
const checkpoints = new Checkpoints($("checkpoints"), readableId, $("checkpoints-panel"));

// The open stream's own state; a failed poll says "unreachable" until the next one answers.
const link = { text: "", kind: "" };

function setLink(text, kind = "") {
  link.text = text;
  link.kind = kind;
  setConnection(text, kind);
}

function setConnection(text, kind = "") {
  const node = $("connection");
  node.textContent = text;
  node.dataset.kind = kind;
}

function showError(where, error) {
  $(where).textContent = error ? error.message || String(error) : "";
}

// An untitled session by what tells it from the others: its id's random part (every id starts "session-").
const shortId = (sessionId) => String(sessionId).replace(/^session-/, "").slice(0, 12);
const lastPart = (cwd) => String(cwd || "").replace(/\/+$/, "").split("/").pop() || cwd || "";
const tokens = (n) => `${(n || 0).toLocaleString("en")} token${n === 1 ? "" : "s"}`;
const modelCalls = (n) => `${n || 0} model call${n === 1 ? "" : "s"}`;

// ------------------------------------------------------------------ the running turn

// The header while a turn runs: a spinner, its elapsed time, and its usage so far (each model
// call's usage_update), then the turn_complete summary.
const turn = {
  startedAt: null,
  usage: null, // {calls, totalTokens} of the running (or last) turn
  timer: null,

  running(on) {
    if (on && this.startedAt === null) {
      this.startedAt = Date.now();
      this.usage = { calls: 0, totalTokens: 0 };
      this.timer = setInterval(() => this.show(), TICK_MS);
    } else if (!on && this.startedAt !== null) {
      this.startedAt = null;
      clearInterval(this.timer);
      this.timer = null;
    }
    this.show();
  },

  since(ms) { // the daemon's word on when the running turn began
    // ms since the epoch (a clock that is not, or one ahead of this one, is not believed)
    if (this.startedAt !== null && Number.isFinite(ms) && ms > 1e12 && ms <= Date.now()) this.startedAt = ms;
    this.show();
  },

  feed(frame) {
    if (frame.type === "turn_complete" || frame.type === "turn_error") {
      const usage = frame.data?.usage;
      if (usage && Number.isInteger(usage.totalTokens)) this.usage = { calls: usage.calls || 0, totalTokens: usage.totalTokens };
      this.show();
      return;
    }
    const update = frame.type === "session_update" ? frame.data?.update : null;
    const usage = update?.sessionUpdate === "agent_message_chunk" ? update._meta?.usage : null;
    if (!usage || this.startedAt === null) return;
    this.usage = { calls: (this.usage?.calls || 0) + 1, totalTokens: (this.usage?.totalTokens || 0) + (usage.totalTokens || 0) };
    this.show();
  },

  reset() {
    this.running(false);
    this.usage = null;
    this.show();
  },

  show() {
    const on = this.startedAt !== null;
    $("turn").hidden = !on;
    if (on) {
      const s = Math.max(0, Math.floor((Date.now() - this.startedAt) / 1000));
      $("turn-elapsed").textContent = s < 60 ? `${s}s` : `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
    }
    const u = this.usage;
    $("turn-usage").textContent = u && (u.calls || u.totalTokens) // a model that reports no usage: nothing to say
      ? `${on ? "this turn" : "last turn"}: ${modelCalls(u.calls)} · ${tokens(u.totalTokens)}` : "";
  },
};

// ------------------------------------------------------------------ drawers (narrow screens)

function drawer(which, open) {
  const panel = $(which === "sessions" ? "sidebar" : "side");
  const button = $(which === "sessions" ? "toggle-sessions" : "toggle-work");
  const other = which === "sessions" ? "work" : "sessions";
  if (open) drawer(other, false);
  panel.classList.toggle("open", open);
  button.setAttribute("aria-expanded", String(open));
  $("scrim").hidden = !document.querySelector(".drawer.open");
}

$("toggle-sessions").addEventListener("click", () => drawer("sessions", !$("sidebar").classList.contains("open")));
$("toggle-work").addEventListener("click", () => drawer("work", !$("side").classList.contains("open")));
$("scrim").addEventListener("click", () => { drawer("sessions", false); drawer("work", false); });
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && document.querySelector(".drawer.open")) {
    drawer("sessions", false);
    drawer("work", false);
  }
});

function showWorkCount() {
  const n = pending.items.size + [...tasks.items.values()].filter((t) => t.live).length;
  $("work-count").textContent = n ? String(n) : "";
}

// ------------------------------------------------------------------ the token

function stopAll() {
  for (const timer of state.timers) clearInterval(timer);
  state.timers = [];
  if (state.stream) state.stream.stop();
}

// The login form. Once the app was shown it stays on screen behind the form (the conversation, the
// draft in the composer): a restarted daemon has a new token, and nothing the reader had is lost.
function showLogin(message = "") {
  stopAll();
  const login = $("login");
  login.classList.toggle("overlay", state.started);
  if (!state.started) $("app").hidden = true;
  login.hidden = false;
  $("login-error").textContent = message;
  setConnection(state.started ? "token needed" : "", "down");
  $("token").focus();
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = $("token").value.trim();
  if (!value) return;
  token.set(value);
  $("token").value = "";
  start();
});

// A `#token=...` URL pasted into this tab, already open.
window.addEventListener("hashchange", () => {
  if (takeTokenFromFragment()) {
    start();
    return;
  }
  const wanted = new URLSearchParams(location.hash.slice(1)).get("session"); // another session's URL
  if (wanted && wanted !== state.sessionId && state.started && $("login").hidden) openSession(wanted);
});

function failed(error) {
  if (error instanceof Unauthorized) {
    token.clear();
    showLogin("The daemon refused that token (it was rotated, or this is another daemon).");
    return true;
  }
  return false;
}

// ------------------------------------------------------------------ sessions

// Waiting prompts only: the running one is not pending (older daemons: pendingCount counts it).
function queuedOf(entry) {
  if (Number.isInteger(entry.queuedCount)) return entry.queuedCount;
  const count = entry.pendingCount || 0;
  return Math.max(0, count - (entry.state === "running" ? 1 : 0));
}

function sessionName(entry) {
  return entry && entry.title ? entry.title : null;
}

// The list's label of a session: its title, else "untitled", its id's random part and its directory's name.
function sessionLabel(entry) {
  const name = sessionName(entry);
  if (name) return name;
  const where = lastPart(entry.cwd);
  return `untitled · ${shortId(entry.sessionId)}${where ? ` · ${where}` : ""}`;
}

async function refreshSessions() {
  try {
    state.sessions = (await api("GET", "/session")).sessions;
  } catch (error) {
    if (!failed(error)) setConnection("⟲ daemon unreachable", "down");
    return;
  }
  if ($("login").hidden) setConnection(link.text, link.kind);
  renderSessions();
  const open = state.sessions.find((s) => s.sessionId === state.sessionId);
  if (open && "title" in open) showTitle(open.title);
}

// A session's tooltip in the list: its whole title (the list may cut it), its id and its directory.
function sessionTooltip(entry) {
  return [sessionLabel(entry), entry.sessionId, entry.cwd].filter(Boolean).join("\n");
}

// The filter box's text: a session is listed when its title, its id or its directory has it (in any case).
function filterText() {
  return $("session-filter").value.trim().replace(/\s+/g, " ").toLowerCase();
}

function matchesFilter(entry, wanted) {
  return [sessionLabel(entry), entry.sessionId, entry.cwd || ""].some((field) => field.toLowerCase().includes(wanted));
}

function renderSessions() {
  if (state.renaming) return; // not while a title is typed in the list
  const wanted = filterText();
  const shown = state.sessions.filter((s) => matchesFilter(s, wanted));
  $("sessions").replaceChildren(...shown.map(sessionItem));
  $("sessions-unmatched").hidden = shown.length > 0 || !wanted;
}

function sessionItem(s) {
  const name = sessionName(s);
  const queued = queuedOf(s);
  return el("li", { dataset: { sessionId: s.sessionId } },
    el("button", {
      type: "button", class: "session-item", "aria-current": s.sessionId === state.sessionId ? "true" : null,
      title: sessionTooltip(s), onclick: () => openSession(s.sessionId),
    },
    el("span", { class: name ? "session-name" : "session-name short-id", text: sessionLabel(s) }),
    el("span", { class: `badge ${s.state}`, text: s.live ? s.state : "restorable" }),
    el("span", { class: "session-meta muted" },
      queued ? el("span", { class: "queued", text: `${queued} queued · ` }) : null,
      el("span", { class: "session-id", text: s.sessionId })),
    el("span", { class: "session-cwd muted", text: s.cwd || "" })),
    el("span", { class: "session-tools" },
      "title" in s ? el("button", { type: "button", "aria-label": "Rename", title: "Rename", onclick: () => rename(s) }, "✎") : null,
      // A live session is closed (DELETE /session/:id) and stays restorable; a stored one can only be
      // deleted for good (POST /sessions/delete).
      s.live
        ? el("button", { type: "button", "aria-label": "Close session", title: "Close this session (it stays restorable)", onclick: () => closeSession(s) }, "✕")
        : el("button", { type: "button", class: "delete", "aria-label": "Delete session", title: "Delete this session for good", onclick: () => deleteSession(s) }, "🗑\uFE0E")));
}

$("session-filter").addEventListener("input", renderSessions);
$("session-filter").addEventListener("keydown", (event) => {
  if (event.key !== "Escape" || !event.target.value) return;
  event.stopPropagation(); // clears the filter; a second Escape closes the drawer
  event.target.value = "";
  renderSessions();
});

function rename(entry) {
  const item = [...$("sessions").children].find((li) => li.dataset.sessionId === entry.sessionId);
  if (!item) return;
  state.renaming = entry.sessionId;
  const input = el("input", { type: "text", "aria-label": "Session title", value: entry.title || "", maxlength: 200 });
  const done = () => {
    state.renaming = null;
    renderSessions();
  };
  const form = el("form", {
    class: "rename",
    onsubmit: async (event) => {
      event.preventDefault();
      try {
        await api("POST", path("session", entry.sessionId, "title"), { title: input.value.trim() });
        entry.title = input.value.trim() || null;
        if (entry.sessionId === state.sessionId) showTitle(entry.title);
      } catch (error) {
        if (failed(error)) return;
        input.setCustomValidity(error.message);
        input.reportValidity();
        return;
      }
      done();
      refreshSessions();
    },
  }, input, el("button", { type: "submit" }, "Save"));
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.stopPropagation();
      done();
    }
  });
  input.addEventListener("input", () => input.setCustomValidity(""));
  item.replaceChildren(form);
  input.focus();
  input.select();
}

async function closeSession(entry) {
  const name = sessionName(entry) || entry.sessionId;
  if (!window.confirm(`Close the session "${name}"? Its running work stops; it stays in the list, restorable.`)) return;
  state.closed.add(entry.sessionId);
  try {
    await api("DELETE", path("session", entry.sessionId));
  } catch (error) {
    state.closed.delete(entry.sessionId);
    if (!failed(error)) showError("composer-error", error);
    return;
  }
  leftSession(entry);
}

async function deleteSession(entry) {
  const name = sessionName(entry) || entry.sessionId;
  if (!window.confirm(`Delete the session "${name}" for good? Its conversation and checkpoints are deleted; this cannot be undone.`)) return;
  state.closed.add(entry.sessionId);
  try {
    const answer = await api("POST", "/sessions/delete", { sessionIds: [entry.sessionId] });
    const refused = (answer.errors || [])[0];
    if (refused) throw new Error(refused.message);
  } catch (error) {
    state.closed.delete(entry.sessionId);
    if (!failed(error)) showError("composer-error", error);
    return;
  }
  leftSession(entry);
}

// The session was closed or deleted: if it was the open one, nothing is open now.
function leftSession(entry) {
  if (entry.sessionId === state.sessionId) {
    if (state.stream) state.stream.stop();
    state.stream = null;
    state.sessionId = null;
    history.replaceState(null, "", location.pathname + location.search);
    state.model = null;
    showModel();
    showTitle(null);
    resetViews();
    updateComposer();
    setLink("");
  }
  refreshSessions();
}

async function refreshRuns() {
  try {
    runs.show((await api("GET", "/subagents")).runs);
  } catch (error) {
    failed(error);
  }
}

async function newSession() {
  const body = {};
  const cwd = $("new-cwd").value.trim();
  const title = $("new-title").value.trim();
  if (cwd) body.cwd = cwd;
  if (title) body.title = title;
  try {
    const info = await api("POST", "/session", body);
    $("new-cwd").value = "";
    $("new-title").value = "";
    await openSession(info.sessionId);
  } catch (error) {
    if (!failed(error)) showError("composer-error", error);
  }
}

$("new-session-form").addEventListener("submit", (event) => {
  event.preventDefault();
  newSession();
});

// ------------------------------------------------------------------ one session

function resetViews() {
  conversation.reset();
  work.reset();
  pending.reset();
  tasks.reset();
  permissions.reset();
  turn.reset();
  hideBanner();
  checkpoints.reset();
  showWorkCount();
}

function showTitle(title) {
  const head = $("session-title");
  const sessionId = state.sessionId;
  head.textContent = sessionId === null ? "No session open" : title || sessionId;
  head.classList.toggle("short-id", sessionId !== null && !title);
  head.title = sessionId || "";
  // The tab says which session it shows.
  document.title = sessionId === null ? "Trellis" : `${title || `untitled · ${shortId(sessionId)}`} — Trellis`;
}

function showModel() {
  const model = state.model || state.caps?.model;
  $("model").textContent = model ? `⚙ ${model}` : "";
}

// The draft of the open session's prompt: kept in this tab as it is typed.
function saveDraft() {
  if (state.sessionId === null) return;
  const value = $("prompt").value;
  if (value) sessionStorage.setItem(DRAFT + state.sessionId, value);
  else sessionStorage.removeItem(DRAFT + state.sessionId);
}

$("prompt").addEventListener("input", saveDraft);

async function openSession(sessionId, again = false) {
  const entry = state.sessions.find((s) => s.sessionId === sessionId);
  try {
    if (!entry || !entry.live) await api("POST", path("session", sessionId, "resume"), {});
  } catch (error) {
    if (!failed(error)) showError("composer-error", error);
    return;
  }
  // The same session again (after a new token): go on from the last event the page has; the
  // daemon replays what was missed, or says to start over (a restarted daemon's new epoch).
  const resume = again && state.stream && state.sessionId === sessionId
    ? { lastId: state.stream.lastId, epoch: state.stream.epoch } : null;
  if (state.stream) state.stream.stop();
  state.closed.delete(sessionId); // restored: readable again
  if (state.sessionId !== sessionId) {
    state.sessionId = sessionId;
    $("prompt").value = sessionStorage.getItem(DRAFT + sessionId) || "";
  } else if (!$("prompt").value) {
    $("prompt").value = sessionStorage.getItem(DRAFT + sessionId) || "";
  }
  history.replaceState(null, "", `#session=${encodeURIComponent(sessionId)}`);
  state.model = null;
  showModel();
  showTitle(sessionName(entry));
  showError("composer-error", null);
  if (!resume) resetViews();
  updateComposer();
  if (window.matchMedia(NARROW).matches) drawer("sessions", false);
  state.stream = new SessionStream(sessionId, {
    frame: (frame) => {
      conversation.feed(frame);
      work.feed(frame);
      turn.feed(frame);
      pending.feed(frame);
      tasks.feed(frame);
      permissions.feed(frame);
      showWorkCount();
      if (frame.type === "session_closed" && frame.data?.reason !== "daemon_shutdown") state.closed.add(sessionId);
      if ((frame.type === "turn_complete" || frame.type === "turn_error") && !state.closed.has(sessionId)) {
        refreshStatus();
        checkpoints.refresh();
      }
      const update = frame.type === "session_update" ? frame.data?.update : null;
      if (update?.sessionUpdate === "agent_message_chunk" && update._meta?.usage) usageChanged();
      if (update?.sessionUpdate === "current_mode_update") $("approval-mode").value = update.currentModeId;
      if (update?.sessionUpdate === "session_info_update" && "title" in update) {
        const listed = state.sessions.find((s) => s.sessionId === sessionId);
        if (listed) listed.title = update.title;
        showTitle(update.title);
        renderSessions();
      }
    },
    resync: () => resetViews(),
    replayed: () => {
      refreshStatus(true);
      checkpoints.refresh();
    },
    state: (what) => {
      if (what === "connected") setLink("● live", "up");
      else if (what === "reconnecting") setLink("⟲ reconnecting…", "down");
      else setLink("session closed", "closed");
      if (what === "closed") work.snapshot({ state: "idle" });
    },
    unauthorized: () => failed(new Unauthorized()),
    gone: async () => { // a restarted daemon: the session is restorable from its state directory
      try {
        await api("POST", path("session", sessionId, "resume"), {});
        return true;
      } catch (error) {
        failed(error);
        return false;
      }
    },
  }, resume).start();
  refreshSessions();
}

// A model call's usage arrived: the header's session total is the status route's again, not only
// after the turn (one request at a time, and one more if calls came in meanwhile: a replay's many
// calls cost a request or two).
const usageRefresh = { busy: false, again: false };
async function usageChanged() {
  if (usageRefresh.busy) {
    usageRefresh.again = true;
    return;
  }
  usageRefresh.busy = true;
  try {
    do {
      usageRefresh.again = false;
      await refreshStatus();
    } while (usageRefresh.again);
  } finally {
    usageRefresh.busy = false;
  }
}

// Align the panels with the daemon's own view (after a replay: what it could not tell).
async function refreshStatus(all = false) {
  const sessionId = readableId();
  if (sessionId === null) return;
  if (all) { // the answers are older than the frames that arrive meanwhile: those are the newer word
    work.asking();
    pending.asking();
    permissions.asking();
  }
  try {
    const status = await api("GET", path("session", sessionId, "status"));
    if (sessionId !== state.sessionId) return;
    const usage = status.usage || {};
    $("session-usage").textContent = `session: ${modelCalls(usage.calls)} · ${tokens(usage.totalTokens)}`;
    if (status.approvalMode) $("approval-mode").value = status.approvalMode;
    state.model = status.modelName || status.model || null; // modelName: the override, else the configured one
    showModel();
    if ("title" in status) showTitle(status.title);
    if (!all) return;
    work.snapshot(status);
    tasks.snapshot(status.backgroundTasks);
    permissions.snapshot(status.pendingPermissions);
    const listed = await api("GET", path("session", sessionId, "pending-prompts"));
    if (sessionId === state.sessionId) pending.snapshot(listed.pendingPrompts);
    showWorkCount();
    if (status.state === "running" && status.currentPromptId) {
      const record = await api("GET", path("session", sessionId, "turns", status.currentPromptId));
      if (sessionId === state.sessionId && record && record.state === "running") turn.since(record.startedAt);
    }
  } catch (error) {
    if (all) {
      work.notAsking();
      pending.notAsking();
      permissions.notAsking();
    }
    failed(error);
  }
}

// ------------------------------------------------------------------ the composer

function updateComposer() {
  const open = state.sessionId !== null;
  const running = work.running !== null;
  $("prompt").disabled = !open;
  $("approval-mode").disabled = !open;
  $("approval-mode").hidden = !open; // with no session there is nothing for a mode to act on
  $("send").disabled = !open;
  $("queue").hidden = !running;
  $("cancel").disabled = !running;
  $("session-state").textContent = open ? (running ? "running" : "idle") : "";
  $("session-state").className = `badge ${running ? "running" : "idle"}`;
}

async function send(asPrompt) {
  const box = $("prompt");
  const text = box.value.trim();
  if (!text || !state.sessionId) return;
  showError("composer-error", null);
  const sessionId = state.sessionId;
  try {
    if (work.running !== null && !asPrompt) {
      const answer = await api("POST", path("session", sessionId, "mid-turn-message"), { message: text });
      if (!answer.accepted && answer.reason !== "session_idle") throw new ApiError(409, { error: `the mid-turn message was not taken (${answer.reason})` });
      if (!answer.accepted) await api("POST", path("session", sessionId, "prompt"), textPrompt(text)); // the turn just ended
      else conversation.line(`↳ mid-turn message queued: ${text}`, "automatic");
    } else {
      await api("POST", path("session", sessionId, "prompt"), textPrompt(text));
    }
    box.value = "";
    sessionStorage.removeItem(DRAFT + sessionId);
    conversation.jump(); // what was sent, and its answer, are what the reader wants to see
  } catch (error) {
    if (!failed(error)) showError("composer-error", error);
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  send(false);
});
$("queue").addEventListener("click", () => send(true));
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("cancel").addEventListener("click", async () => {
  try {
    await api("POST", path("session", state.sessionId, "cancel"));
  } catch (error) {
    if (!failed(error)) showError("composer-error", error);
  }
});
$("new-session").addEventListener("click", newSession);
$("jump").addEventListener("click", () => conversation.jump());
$("approval-mode").addEventListener("change", async (event) => {
  try {
    await api("POST", path("session", state.sessionId, "approval-mode"), { mode: event.target.value });
  } catch (error) {
    if (!failed(error)) showError("composer-error", error);
    refreshStatus();
  }
});

// ------------------------------------------------------------------ rewind (checkpoints)

// "Rewind here" on a user turn: a dialog of the page's own (a checkbox: the files too), then
// POST /session/:id/rewind. Files changed outside the session are listed, with "Rewind anyway";
// a rewind that restored files offers "Undo" in a banner above the composer.
const rewind = { entry: null, turn: null, busy: false, undoId: null };

const keepsCheckpoints = () => Array.isArray(state.caps?.features) && state.caps.features.includes("checkpoints");
const count = (list) => (Array.isArray(list) ? list.length : 0);

// The turn's number as the daemon counts them: its checkpoint listing names each turn's promptId;
// else the page's own count (it saw every turn since the conversation began).
async function turnOf(entry) {
  const promptId = entry.dataset.promptId;
  if (keepsCheckpoints() && promptId) {
    try {
      const listed = await api("GET", path("session", state.sessionId, "checkpoints"));
      const found = (listed.checkpoints || []).find((c) => c.promptId === promptId);
      if (found) return { turn: found.turn, checkpoint: true };
    } catch (error) {
      if (failed(error)) return null;
    }
  }
  return { turn: Number(entry.dataset.turn), checkpoint: false };
}

function listPaths(list, paths) {
  const shown = paths.slice(0, 50).map((p) => el("li", { text: p }));
  if (paths.length > shown.length) shown.push(el("li", { class: "muted", text: `… ${paths.length - shown.length} more` }));
  list.replaceChildren(...shown);
}

async function openRewind(entry) {
  if (!state.sessionId || rewind.busy) return;
  const found = await turnOf(entry);
  if (!found || !Number.isInteger(found.turn)) return;
  rewind.entry = entry;
  rewind.turn = found.turn;
  const can = keepsCheckpoints();
  const files = $("rewind-files");
  files.checked = can && found.checkpoint;
  files.disabled = !can || !found.checkpoint;
  $("rewind-no-files").hidden = can && found.checkpoint;
  $("rewind-no-files").textContent = can
    ? "This turn has no checkpoint (taken before checkpoints were on, or compacted since): only the conversation can be rewound."
    : "This daemon keeps no checkpoints: only the conversation can be rewound.";
  const said = entry.querySelector(".msg.user")?.textContent || "";
  $("rewind-what").textContent = `Turn ${found.turn} (“${short(said, 80)}”) and everything after it will be dropped from the conversation.`;
  $("rewind-outside").hidden = true;
  $("rewind-anyway").hidden = true;
  $("rewind-confirm").hidden = false;
  $("rewind-error").textContent = "";
  $("rewind-dialog").showModal();
}

async function doRewind(force) {
  if (rewind.busy || rewind.entry === null) return;
  rewind.busy = true;
  const files = $("rewind-files").checked;
  const body = { turn: rewind.turn };
  if (files) body.files = true;
  if (force) body.force = true;
  $("rewind-error").textContent = "";
  // The conversation is cut by the rewind's event, on this page as on every other client's.
  conversation.rewindHint = { turn: rewind.turn, entry: rewind.entry };
  try {
    const answer = await api("POST", path("session", state.sessionId, "rewind"), body);
    $("rewind-dialog").close();
    conversation.jump();
    checkpoints.refresh();
    const skipped = count(answer.skipped) ? `, ${count(answer.skipped)} left alone` : "";
    showBanner(`Rewound to the start of turn ${rewind.turn}. ` + (answer.undoId
      ? `Files: ${count(answer.restored)} restored, ${count(answer.deleted)} deleted${skipped}.`
      : "The files were left as they are."), answer.undoId);
  } catch (error) {
    conversation.rewindHint = null;
    if (failed(error)) {
      $("rewind-dialog").close();
    } else if (error instanceof ApiError && error.code === "files_changed_outside") {
      listPaths($("rewind-paths"), error.paths);
      $("rewind-outside").hidden = false;
      $("rewind-anyway").hidden = false;
      $("rewind-confirm").hidden = true;
      $("rewind-anyway").focus();
    } else {
      $("rewind-error").textContent = error.message || String(error);
    }
  } finally {
    rewind.busy = false;
  }
}

$("rewind-form").addEventListener("submit", (event) => {
  event.preventDefault(); // the dialog stays open until the rewind is done (or refused)
  doRewind(event.submitter?.value === "anyway");
});
$("rewind-cancel").addEventListener("click", () => $("rewind-dialog").close());
$("rewind-dialog").addEventListener("close", () => {
  const entry = rewind.entry;
  rewind.entry = null;
  const button = entry?.querySelector(".rewind-here");
  if (button && !button.disabled) button.focus(); // back where the reader was
});

function showBanner(text, undoId) {
  rewind.undoId = undoId || null;
  $("rewind-banner-text").textContent = text;
  $("rewind-undo").hidden = !undoId;
  $("rewind-undo-anyway").hidden = true;
  $("rewind-banner-paths").hidden = true;
  $("rewind-banner").hidden = false;
}

function hideBanner() {
  rewind.undoId = null;
  $("rewind-banner").hidden = true;
}

async function undoRewind(force) {
  const undoId = rewind.undoId;
  if (!undoId || rewind.busy) return;
  rewind.busy = true;
  try {
    const answer = await api("POST", path("session", state.sessionId, "checkpoints", "undo", undoId), force ? { force: true } : {});
    checkpoints.refresh();
    showBanner(`Undone: the conversation and the files are back as they were before the rewind (${count(answer.restored)} restored, ${count(answer.deleted)} deleted).`, null);
  } catch (error) {
    if (failed(error)) return;
    if (error instanceof ApiError && error.code === "files_changed_outside") {
      $("rewind-banner-text").textContent = "These files were changed since the rewind; undoing it would overwrite them:";
      listPaths($("rewind-banner-paths"), error.paths);
      $("rewind-banner-paths").hidden = false;
      $("rewind-undo").hidden = true;
      $("rewind-undo-anyway").hidden = false;
      $("rewind-undo-anyway").focus();
    } else {
      $("rewind-banner-text").textContent = `The undo failed: ${error.message || error}`;
    }
  } finally {
    rewind.busy = false;
  }
}

$("rewind-undo").addEventListener("click", () => undoRewind(false));
$("rewind-undo-anyway").addEventListener("click", () => undoRewind(true));
$("rewind-dismiss").addEventListener("click", hideBanner);

// ------------------------------------------------------------------ start

async function start() {
  stopAll();
  let caps;
  try {
    caps = await api("GET", "/capabilities");
  } catch (error) {
    if (!failed(error)) showLogin(`The daemon did not answer: ${error.message}`);
    return;
  }
  state.caps = caps;
  checkpoints.enable(keepsCheckpoints());
  $("login").hidden = true;
  $("login").classList.remove("overlay");
  $("app").hidden = false;
  const again = state.started;
  state.started = true;
  showModel();
  $("daemon").textContent = `sandbox ${caps.sandbox} · todo stop guard ${caps.todoStopGuard ? "on" : "off"}`;
  await refreshSessions();
  await refreshRuns();
  state.timers = [setInterval(refreshSessions, SESSIONS_EVERY_MS), setInterval(refreshRuns, RUNS_EVERY_MS)];
  const wanted = new URLSearchParams(location.hash.slice(1)).get("session") || state.sessionId;
  if (wanted) await openSession(wanted, again);
}

takeTokenFromFragment();
if (token.get()) start();
else showLogin();
