// The open session's work beside its conversation: the running turn, the prompt FIFO, the
// background tasks, the permission requests; and the daemon's subagent runs.
//
// Each panel keeps its items from the stream's frames and is aligned with the daemon's own
// answer (GET status, pending-prompts) after every (re)connection's replay, so an item the
// replay could not tell about (a permission resolved while away) does not linger.

import { api, path } from "./api.js";
import { diffPreview, el, optionName, short, visible } from "./dom.js";

const OUTPUT_KEPT = 8000; // characters of a task's live output kept on the page
const ENDED_TASKS_KEPT = 12;
const IDS_KEPT = 512; // prompt ids remembered as ended: enough for any replay, bounded for a long life

// A set that forgets its oldest members past ``limit``.
export class RecentSet {
  constructor(limit = IDS_KEPT) {
    this.limit = limit;
    this.items = new Set();
  }

  add(value) {
    this.items.delete(value);
    this.items.add(value);
    if (this.items.size > this.limit) this.items.delete(this.items.values().next().value);
  }

  has(value) {
    return this.items.has(value);
  }

  delete(value) {
    return this.items.delete(value);
  }

  get size() {
    return this.items.size;
  }
}

function showEmpty(list) {
  const empty = list.parentElement.querySelector(".empty");
  if (empty) empty.hidden = list.children.length > 0;
}

// Which prompt's turn runs (null when idle). "work" stands for an automatic turn.
export class Work {
  constructor(changed) {
    this.changed = changed;
    this.reset();
  }

  reset() {
    this.running = null;
    this.ended = new RecentSet();
    this.asked = false; // the daemon is being asked for its status
    this.movedSinceAsked = false; // and a frame changed what runs since: the answer is older than it
  }

  asking() {
    this.asked = true;
    this.movedSinceAsked = false;
  }

  notAsking() {
    this.asked = false;
  }

  feed(frame) {
    const id = typeof frame.promptId === "string" ? frame.promptId : null;
    const before = this.running;
    if (frame.type === "turn_complete" || frame.type === "turn_error") {
      const ended = id || frame.data?.promptId || null;
      if (ended) this.ended.add(ended);
      if (!ended || this.running === ended || this.running === "work") this.running = null;
    } else if (frame.type === "pending_prompt_started" || (frame.type === "session_update" && id)) {
      if (id && !this.ended.has(id)) this.running = id;
    }
    if (before !== this.running) {
      if (this.asked) this.movedSinceAsked = true;
      this.changed();
    }
  }

  snapshot(status) {
    const stale = this.asked && this.movedSinceAsked;
    this.asked = false;
    if (stale) return; // made before frames that moved the turn on: they are the newer word
    const running = status.state === "running" ? status.currentPromptId || "work" : null;
    if (running !== this.running) {
      this.running = running;
      this.changed();
    }
  }
}

export class PendingPrompts {
  constructor(list, session) {
    this.list = list;
    this.session = session; // () => the open session's id
    this.reset();
  }

  reset() {
    this.items = new Map(); // promptId -> text, in FIFO order
    this.gone = new RecentSet();
    this.since = null; // frames fed since the daemon was asked for a snapshot (null: not asked)
    this.render();
  }

  // The daemon is being asked for the queue: the frames that arrive before its answer are applied again on
  // top of it (the answer was made before them, and would otherwise drop a prompt queued meanwhile).
  asking() {
    this.since = [];
  }

  notAsking() { // the question failed: nothing to apply the frames to
    this.since = null;
  }

  feed(frame) {
    if (frame.type === "mid_turn_message_injected") { // waiting mid-turn messages, pending under their ids, taken
      const taken = Array.isArray(frame.data?.messageIds) ? frame.data.messageIds : [];
      this.since?.push(frame);
      for (const id of taken) {
        this.gone.add(id);
        this.items.delete(id);
      }
      if (taken.length) this.render();
      return;
    }
    const id = frame.promptId || frame.data?.promptId;
    if (!id) return;
    this.since?.push(frame);
    if (frame.type === "pending_prompt_added" && !this.gone.has(id)) this.items.set(id, String(frame.data?.text ?? ""));
    else if (["pending_prompt_started", "pending_prompt_completed", "turn_complete", "turn_error"].includes(frame.type)) {
      this.gone.add(id);
      this.items.delete(id);
    } else return;
    this.render();
  }

  snapshot(pending) {
    const since = this.since || [];
    this.since = null;
    // A prompt seen to leave never comes back (ids are never reused): an answer made before it left, arriving
    // after a second refresh took the frames that said so, must not list it again.
    this.items = new Map(pending.filter((p) => p.state === "queued" && !this.gone.has(p.promptId))
      .map((p) => [p.promptId, String(p.text ?? "")]));
    for (const frame of since) this.feed(frame);
    this.render();
  }

  render() {
    this.list.replaceChildren(...[...this.items].map(([id, text]) => el("li", { dataset: { promptId: id } },
      el("span", { class: "item-text", text: short(text, 200) }),
      el("button", { type: "button", onclick: (event) => this.abort(id, event.currentTarget) }, "Abort"))));
    showEmpty(this.list);
  }

  async abort(id, button) {
    button.disabled = true;
    try {
      let answer = await api("DELETE", path("session", this.session(), "pending-prompts", id));
      if (!answer.removed) { // a waiting mid-turn message is listed under its id too
        answer = await api("DELETE", path("session", this.session(), "mid-turn-messages", id));
      }
      this.gone.add(id); // removed now, or gone before the answer: either way it is not queued
      this.items.delete(id);
      this.render();
    } catch (error) {
      button.disabled = false;
      button.title = error.message;
    }
  }
}

export class BackgroundTasks {
  constructor(list, session) {
    this.list = list;
    this.session = session;
    this.reset();
  }

  reset() {
    this.items = new Map(); // taskId -> {kind, label, live, state, output}
    this.render();
  }

  feed(frame) {
    if (frame.type !== "background_task") return;
    const d = frame.data || {};
    const id = String(d.taskId);
    const item = this.items.get(id) || { kind: d.kind, label: d.label || "", live: true, state: "running", output: "" };
    if (d.status === "started") Object.assign(item, { kind: d.kind, label: d.label || "", live: true, state: "running" });
    else if (d.status === "output") {
      item.output = (item.output + String(d.text ?? "")).slice(-OUTPUT_KEPT);
      if (d.truncated) item.output += `\n… ${d.truncated} more characters`;
    } else if (d.status === "finished") {
      item.live = false;
      item.state = d.state || "finished";
      if (d.exitCode !== undefined && d.exitCode !== null) item.state += ` (exit ${d.exitCode})`;
    }
    this.items.set(id, item);
    this.render();
  }

  snapshot(tasks) {
    const live = new Map((tasks || []).filter((t) => ["running", "paused", "scheduled"].includes(t.status))
      .map((t) => [t.taskId, t]));
    for (const [id, item] of this.items) {
      if (item.live && !live.has(id)) Object.assign(item, { live: false, state: "ended" });
    }
    for (const [id, t] of live) {
      if (!this.items.has(id)) this.items.set(id, { kind: t.kind, label: t.label || "", live: true, state: t.status, output: "" });
    }
    this.render();
  }

  render() {
    const ended = [...this.items].filter(([, t]) => !t.live);
    for (const [id] of ended.slice(0, Math.max(0, ended.length - ENDED_TASKS_KEPT))) this.items.delete(id);
    this.list.replaceChildren(...[...this.items].map(([id, t]) => el("li", { dataset: { taskId: id }, class: t.live ? "live" : "ended" },
      el("div", { class: "item-head" },
        el("span", { class: "item-text", text: `${t.kind} ${id}` }),
        el("span", { class: "badge", text: t.state }),
        t.live ? el("button", { type: "button", onclick: (event) => this.kill(id, event.currentTarget) }, "Kill") : null),
      el("div", { class: "muted", text: short(t.label, 200) }),
      t.output ? el("pre", { class: "output", text: t.output }) : null)));
    for (const pre of this.list.querySelectorAll("pre")) pre.scrollTop = pre.scrollHeight;
    showEmpty(this.list);
  }

  async kill(id, button) {
    button.disabled = true;
    try {
      await api("DELETE", path("session", this.session(), "background-tasks", id));
    } catch (error) {
      button.disabled = false;
      button.title = error.message;
    }
  }
}

// What an edit or a write asks to change: its diff (the request's toolCall.content), as text, before the
// choices; a line says when not all of it is shown, or when the request carries none (too large to send).
function changes(call) {
  const diffs = (Array.isArray(call.content) ? call.content : []).filter((item) => item && item.type === "diff");
  const out = [];
  for (const diff of diffs) {
    const preview = diffPreview(diff);
    out.push(el("pre", { class: "output diff permission-diff", "aria-label": `The change to ${diff.path}`, text: preview.text }));
    if (preview.hidden) {
      out.push(el("div", { class: "permission-warning", text: `⚠ Not shown: ${preview.hidden} of its ${preview.total} changed lines (or shown in part). Reject it unless you have inspected all of it.` }));
    }
  }
  if (!diffs.length && call.kind === "edit") {
    out.push(el("div", { class: "permission-warning", text: "⚠ This request carries no diff (the change is too large to send). Reject it unless you have inspected the change." }));
  }
  return out;
}

export class Permissions {
  constructor(region, session) {
    this.region = region;
    this.session = session;
    this.reset();
  }

  reset() {
    this.items = new Map(); // requestId -> the permission_request data
    this.since = null; // frames fed since the daemon was asked for a snapshot (as PendingPrompts)
    this.render();
  }

  asking() {
    this.since = [];
  }

  notAsking() { // the question failed: nothing to apply the frames to
    this.since = null;
  }

  feed(frame) {
    const d = frame.data || {};
    if (frame.type === "permission_request" || frame.type === "permission_resolved") this.since?.push(frame);
    if (frame.type === "permission_request" && typeof d.requestId === "string") this.items.set(d.requestId, d);
    else if (frame.type === "permission_resolved") this.items.delete(d.requestId);
    else return;
    this.render();
  }

  snapshot(pendingIds) {
    const since = this.since || [];
    this.since = null;
    const live = new Set(pendingIds || []);
    for (const id of [...this.items.keys()]) if (!live.has(id)) this.items.delete(id);
    for (const frame of since) this.feed(frame);
    this.render();
  }

  render() {
    this.region.replaceChildren(...[...this.items].map(([id, d]) => {
      const call = d.toolCall || {};
      const raw = call.rawInput && typeof call.rawInput === "object" && typeof call.rawInput.command === "string"
        ? call.rawInput.command : null;
      // The model chose the title and the command: their hidden characters (bidirectional overrides that show
      // `curl …|sh` reversed, C0 controls) are made visible, as in the conversation — this is where the vote is.
      const title = visible(call.title || "a tool call");
      return el("div", { class: "permission", dataset: { requestId: id }, role: "group", "aria-label": `Permission: ${title}` },
        el("div", { class: "permission-title", text: `${call.kind ? `${visible(call.kind)}: ` : ""}${title}` }),
        raw && raw !== call.title ? el("code", { class: "permission-command", text: visible(raw) }) : null,
        changes(call),
        el("div", { class: "actions" }, (d.options || []).map((option) => el("button", {
          type: "button", class: option.kind?.startsWith("allow") ? "allow" : "reject",
          onclick: (event) => this.vote(id, option.optionId, event.currentTarget),
        }, optionName(option)))));
    }));
    this.region.hidden = this.items.size === 0;
  }

  async vote(id, optionId, button) {
    for (const b of button.parentElement.querySelectorAll("button")) b.disabled = true;
    try {
      await api("POST", path("session", this.session(), "permission", id), { outcome: { outcome: "selected", optionId } });
    } catch (error) {
      if (error.status === 404) { // resolved already (by another client, or the grace period)
        this.items.delete(id);
        this.render();
        return;
      }
      for (const b of button.parentElement.querySelectorAll("button")) b.disabled = false;
      button.title = error.message;
    }
  }
}

// The daemon's subagent runs (GET /subagents): turn N of M, the state, how a run ended.
export class SubagentRuns {
  constructor(list, openSession) {
    this.list = list;
    this.openSession = openSession; // a run's child session, to answer what it waits for
    this.shown = "";
  }

  show(runs) {
    const key = JSON.stringify(runs.map((r) => [r.name, r.turn, r.maxTurns, r.state, r.endReason, r.question,
      r.waitingForVote]));
    if (key === this.shown) return; // unchanged: leave the DOM (and a reader's selection) alone
    this.shown = key;
    this.list.replaceChildren(...runs.map((r) => {
      let end = null;
      if (r.endReason) {
        const self = r.endReason === "goal_reached" ? " (self-reported)" : "";
        end = el("div", { class: "run-end", text: `ended: ${r.endReason}${self}` });
      }
      return el("li", { dataset: { run: r.name }, class: r.ended ? "ended" : "live" },
        el("div", { class: "item-head" },
          el("span", { class: "item-text", text: r.name }),
          el("span", { class: "badge", text: r.state })),
        el("div", { class: "run-turn", text: `turn ${r.turn} of ${r.maxTurns}` }),
        r.goal ? el("div", { class: "muted", text: `goal: ${short(r.goal, 160)}` }) : null,
        end,
        r.endReason === "need_help" && r.question ? el("div", { class: "run-question", text: `asks: ${r.question}` }) : null,
        ...(r.waitingForVote || []).map((vote) => this.waiting(r, vote)));
    }));
    showEmpty(this.list);
  }

  // A permission request of the run's child that nobody has answered: only a client of that session can.
  waiting(run, vote) {
    return el("div", { class: "run-question" },
      el("span", { text: `waits for a vote: ${visible(short(vote.title, 160))} ` }),
      el("button", { type: "button", onclick: () => this.openSession(run.childSessionId) }, "Open its session"));
  }
}

const CHANGE_MARKS = { added: "+", deleted: "−", modified: "~" };
const DIFF_CHARS = 200_000; // characters of a turn's diff shown on the page (the route has it whole)

// The open session's checkpoints (GET /session/:id/checkpoints): each user turn that has one, numbered
// as a rewind counts them, with the files it changed, and a Diff button that shows the turn's unified
// diff as preformatted text (set as text: a file's content is never markup).
export class Checkpoints {
  constructor(list, sessionId, section) {
    this.list = list;
    this.sessionId = sessionId;
    this.section = section;
    this.loading = false;
    this.again = false;
    this.enabled = false;
  }

  reset() {
    this.list.replaceChildren();
    showEmpty(this.list);
  }

  enable(on) {
    this.enabled = on;
    this.section.hidden = !on;
  }

  // Read the listing again (one request at a time; one more if asked meanwhile).
  async refresh() {
    if (!this.enabled || !this.sessionId()) return;
    if (this.loading) {
      this.again = true;
      return;
    }
    this.loading = true;
    try {
      do {
        this.again = false;
        const sessionId = this.sessionId();
        let listed;
        try {
          listed = await api("GET", path("session", sessionId, "checkpoints"));
        } catch {
          listed = null;
        }
        if (listed && sessionId === this.sessionId()) this.show(sessionId, listed);
      } while (this.again);
    } finally {
      this.loading = false;
    }
  }

  show(sessionId, listed) {
    const open = new Set([...this.list.querySelectorAll("li[data-open]")].map((li) => li.dataset.turn));
    this.list.replaceChildren(...(listed.checkpoints || []).map((c) => {
      const files = Array.isArray(c.files) ? c.files : [];
      const diff = el("pre", { class: "output diff", hidden: true, "aria-label": `Diff of turn ${c.turn}` });
      const button = el("button", { type: "button", "aria-expanded": "false", onclick: () => this.toggle(sessionId, c.turn, li, diff, button) }, "Diff");
      const li = el("li", { dataset: { turn: String(c.turn) } },
        el("div", { class: "item-head" },
          el("span", { class: "item-text", text: `Turn ${c.turn}: ${files.length ? `${files.length} file${files.length === 1 ? "" : "s"} changed` : "no file changed"}` }),
          files.length ? button : null),
        files.length ? el("ul", { class: "paths" }, files.slice(0, 50).map((f) => el("li", { text: `${CHANGE_MARKS[f.change] || "?"} ${f.path}` }))) : null,
        files.length > 50 ? el("span", { class: "muted", text: `… ${files.length - 50} more` }) : null,
        diff);
      if (open.has(String(c.turn)) && files.length) this.toggle(sessionId, c.turn, li, diff, button);
      return li;
    }));
    showEmpty(this.list);
  }

  async toggle(sessionId, turn, li, diff, button) {
    if (!diff.hidden) {
      diff.hidden = true;
      delete li.dataset.open;
      button.setAttribute("aria-expanded", "false");
      return;
    }
    li.dataset.open = "";
    button.setAttribute("aria-expanded", "true");
    diff.hidden = false;
    diff.textContent = "…";
    try {
      const answer = await api("GET", path("session", sessionId, "checkpoints", String(turn), "diff"));
      const whole = String(answer.diff || "");
      diff.textContent = whole.length > DIFF_CHARS
        ? `${whole.slice(0, DIFF_CHARS)}\n… ${whole.length - DIFF_CHARS} more characters` : whole || "(no change)";
    } catch (error) {
      diff.textContent = `the diff could not be read: ${error.message || error}`;
    }
  }
}
