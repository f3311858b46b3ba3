// The page: the token, the sessions list, the open session's stream, the composer.

import { ApiError, Unauthorized, api, path, takeTokenFromFragment, textPrompt, token } from "./api.js";
import { el } from "./dom.js";
import { BackgroundTasks, PendingPrompts, Permissions, SubagentRuns, Work } from "./panels.js";
import { SessionStream } from "./stream.js";
import { Conversation } from "./view.js";

const SESSIONS_EVERY_MS = 2000;
const RUNS_EVERY_MS = 1000;

const $ = (id) => document.getElementById(id);

const state = {
  sessionId: null,
  stream: null,
  sessions: [],
  timers: [],
};

const openId = () => state.sessionId;
const conversation = new Conversation($("conversation"));
const work = new Work(() => {
  updateComposer();
  refreshSessions(); // the list shows each session's state: this one's just changed
});
const pending = new PendingPrompts($("pending"), openId);
const tasks = new BackgroundTasks($("tasks"), openId);
const permissions = new Permissions($("permissions"), openId);
const runs = new SubagentRuns($("runs"));

function setConnection(text, kind = "") {
  const node = $("connection");
  node.textContent = text;
  node.dataset.kind = kind;
}

function showError(where, error) {
  $(where).textContent = error ? error.message || String(error) : "";
}

// ------------------------------------------------------------------ the token

function showLogin(message = "") {
  for (const timer of state.timers) clearInterval(timer);
  state.timers = [];
  if (state.stream) state.stream.stop();
  $("app").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  setConnection("");
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

function failed(error) {
  if (error instanceof Unauthorized) {
    token.clear();
    showLogin("The daemon refused that token (a restarted daemon has a new one).");
    return true;
  }
  return false;
}

// ------------------------------------------------------------------ sessions

async function refreshSessions() {
  try {
    state.sessions = (await api("GET", "/session")).sessions;
  } catch (error) {
    if (!failed(error)) setConnection("⟲ daemon unreachable", "down");
    return;
  }
  $("sessions").replaceChildren(...state.sessions.map((s) => el("li", {},
    el("button", {
      type: "button", class: "session-item", "aria-current": s.sessionId === state.sessionId ? "true" : null,
      onclick: () => openSession(s.sessionId),
    },
    el("span", { class: "session-id", text: s.sessionId }),
    el("span", { class: `badge ${s.state}`, text: s.live ? s.state : "restorable" }),
    s.pendingCount ? el("span", { class: "muted", text: `${s.pendingCount} pending` }) : null,
    el("span", { class: "session-cwd muted", text: s.cwd || "" })))));
}

async function refreshRuns() {
  try {
    runs.show((await api("GET", "/subagents")).runs);
  } catch (error) {
    failed(error);
  }
}

async function newSession() {
  try {
    const info = await api("POST", "/session", {});
    await openSession(info.sessionId);
  } catch (error) {
    if (!failed(error)) showError("composer-error", error);
  }
}

// ------------------------------------------------------------------ one session

function resetViews() {
  conversation.reset();
  work.reset();
  pending.reset();
  tasks.reset();
  permissions.reset();
}

async function openSession(sessionId) {
  const entry = state.sessions.find((s) => s.sessionId === sessionId);
  try {
    if (!entry || !entry.live) await api("POST", path("session", sessionId, "resume"), {});
  } catch (error) {
    if (!failed(error)) showError("composer-error", error);
    return;
  }
  if (state.stream) state.stream.stop();
  state.sessionId = sessionId;
  history.replaceState(null, "", `#session=${encodeURIComponent(sessionId)}`);
  $("session-title").textContent = sessionId;
  showError("composer-error", null);
  resetViews();
  updateComposer();
  state.stream = new SessionStream(sessionId, {
    frame: (frame) => {
      conversation.feed(frame);
      work.feed(frame);
      pending.feed(frame);
      tasks.feed(frame);
      permissions.feed(frame);
      if (frame.type === "turn_complete" || frame.type === "turn_error") refreshStatus();
      const update = frame.type === "session_update" ? frame.data?.update : null;
      if (update?.sessionUpdate === "current_mode_update") $("approval-mode").value = update.currentModeId;
    },
    resync: () => resetViews(),
    replayed: () => refreshStatus(true),
    state: (what) => {
      if (what === "connected") setConnection("● live", "up");
      else if (what === "reconnecting") setConnection("⟲ reconnecting…", "down");
      else setConnection("session closed", "closed");
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
  }).start();
  refreshSessions();
}

// Align the panels with the daemon's own view (after a replay: what it could not tell).
async function refreshStatus(all = false) {
  const sessionId = state.sessionId;
  try {
    const status = await api("GET", path("session", sessionId, "status"));
    if (sessionId !== state.sessionId) return;
    const usage = status.usage || {};
    $("session-usage").textContent = `${usage.calls || 0} model calls · ${(usage.totalTokens || 0).toLocaleString("en")} tokens`;
    if (status.approvalMode) $("approval-mode").value = status.approvalMode;
    if (!all) return;
    work.snapshot(status);
    tasks.snapshot(status.backgroundTasks);
    permissions.snapshot(status.pendingPermissions);
    const listed = await api("GET", path("session", sessionId, "pending-prompts"));
    if (sessionId === state.sessionId) pending.snapshot(listed.pendingPrompts);
  } catch (error) {
    failed(error);
  }
}

// ------------------------------------------------------------------ the composer

function updateComposer() {
  const open = state.sessionId !== null;
  const running = work.running !== null;
  $("prompt").disabled = !open;
  $("approval-mode").disabled = !open;
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
$("approval-mode").addEventListener("change", async (event) => {
  try {
    await api("POST", path("session", state.sessionId, "approval-mode"), { mode: event.target.value });
  } catch (error) {
    if (!failed(error)) showError("composer-error", error);
    refreshStatus();
  }
});

// ------------------------------------------------------------------ start

async function start() {
  let caps;
  try {
    caps = await api("GET", "/capabilities");
  } catch (error) {
    if (!failed(error)) showLogin(`The daemon did not answer: ${error.message}`);
    return;
  }
  $("login").hidden = true;
  $("app").hidden = false;
  $("daemon").textContent = `model ${caps.model} · sandbox ${caps.sandbox} · todo stop guard ${caps.todoStopGuard ? "on" : "off"}`;
  await refreshSessions();
  await refreshRuns();
  state.timers = [setInterval(refreshSessions, SESSIONS_EVERY_MS), setInterval(refreshRuns, RUNS_EVERY_MS)];
  const wanted = new URLSearchParams(location.hash.slice(1)).get("session");
  if (wanted) await openSession(wanted);
}

takeTokenFromFragment();
if (token.get()) start();
else showLogin();
