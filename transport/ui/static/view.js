// The conversation of the open session, as its event frames build it (docs/protocol.md, "Events").
//
// Streamed text and thoughts are appended to the open bubble of their kind; anything else
// closes it. A tool call is one card, updated in place by its toolCallId. Guard
// continuations and exhaustion, hook results, automatic turns and turn ends are lines of
// their own. Everything is set as text (dom.js), but for the model's answers: markdown, rendered
// to sanitized, inert DOM (markdown.js) — the open answer at most once per animation frame while
// it streams, and once more when it closes; a closed one is never rendered again. The markdown is
// parsed in a worker, each parse within a time budget: an answer whose parse overruns it (a model can
// write text that takes marked minutes) is shown as plain text, and the page never waits for it.
//
// The log follows the stream while the reader is at its bottom; scrolling up stops that (and
// ``onFollow(false)`` shows the "jump to latest" control) until they come back down or jump.

import { el, inputPreview, optionName, short, textOf, toolOutput, visible } from "./dom.js";
import { parseMarkdown } from "./markdown.js";
import { RecentSet } from "./panels.js";

const GUARD_SOURCE = "todo_stop_guard";
const PLAN_MARKS = { pending: "○", in_progress: "◐", completed: "✓" };
const TERMINAL = new Set(["completed", "failed"]);
const SLASH_COMMAND = /^\/(clear|compact|model)(?:\s|$)/; // the session's own commands: no user turn
// Entries kept on the page: a session that runs for days must not grow the page without end. The
// oldest go first, counted in a line at the top (the transcript and GET .../transcript keep them).
export const MAX_ENTRIES = 2000;
// How near the bottom (px) counts as "at the bottom": a reader there is followed.
const AT_BOTTOM = 48;
const TITLE_CHARS = 200; // of a tool call's title on its card

export class Conversation {
  constructor(log, onFollow = () => {}, onRewind = () => {}) {
    this.log = log;
    this.onFollow = onFollow;
    this.onRewind = onRewind; // (entry): the "Rewind here" of a user turn was pressed
    this.following = true;
    this.lastTop = 0;
    this.scheduled = false;
    log.addEventListener("scroll", () => this.scrolled());
    // The log shrinks when a permission request or a longer draft takes room below it: still followed.
    if (typeof ResizeObserver === "function") new ResizeObserver(() => this.stick()).observe(log);
    this.reset();
  }

  reset() {
    this.log.replaceChildren();
    this.dropped = 0;
    this.droppedLine = null;
    this.open = null; // {kind, node, text, dirty}: the bubble streamed text goes to
    this.setFollowing(true);
    this.tools = new Map(); // toolCallId -> {card, status, output}
    this.toolNames = new Map(); // toolCallId -> the title a permission request gave it (its tool_call may be gone)
    this.options = new Map(); // permission requestId -> its options, to name the one voted for
    this.waiting = new RecentSet(); // prompts that were queued and have not started: their end is no turn
    this.turnCount = 0; // user turns shown (not rewound): the next one's number as a rewind counts them
    this.cuts = new Map(); // undoId -> {nodes, turnCount}: what a rewind dimmed, for its undo
    this.rewindHint = null; // {turn, entry}: the rewind this page asked for, until its event comes
  }

  // ------------------------------------------------------------ rewinds

  // Turns before a /clear cannot be rewound to any more.
  forgetTurns() {
    for (const entry of this.log.querySelectorAll(".user-turn:not(.rewound) .turn-tools")) entry.remove();
    this.turnCount = 0;
  }

  // A rewind to the turn of ``entry`` was done: it and everything after it are dimmed (no longer in the
  // session), a line says so, and an undo (``undoId``) can bring them back.
  rewound(entry, turn, undoId) {
    this.close();
    const nodes = [];
    for (let node = entry; node; node = node.nextElementSibling) {
      if (node.classList.contains("rewound")) continue;
      node.classList.add("rewound");
      node.setAttribute("aria-disabled", "true");
      nodes.push(node);
    }
    const before = this.turnCount;
    this.turnCount = turn;
    for (const button of this.log.querySelectorAll(".rewound .rewind-here")) button.disabled = true;
    const line = this.line(`✂ conversation rewound to the start of turn ${turn}: what is dimmed above is no longer in the session`, "warn rewind-cut");
    if (undoId) this.cuts.set(undoId, { nodes, turnCount: before, line });
    return line;
  }

  // A rewind's event, this page's or another client's: user turn ``turn`` (as the daemon counts them) and
  // everything after it left the conversation. The page that asked for it names the entry it meant
  // (``rewindHint``): after a compaction the daemon's count and the page's differ.
  rewoundTo(turn, undoId) {
    const hint = this.rewindHint;
    if (hint?.turn === turn) this.rewindHint = null;
    const entry = hint?.turn === turn && hint.entry.isConnected ? hint.entry
      : [...this.log.querySelectorAll(".user-turn:not(.rewound)")].find((e) => Number(e.dataset.turn) === turn);
    if (entry && !entry.classList.contains("rewound")) return this.rewound(entry, turn, undoId);
    this.turnCount = turn; // a turn this page never showed (before its replay window): nothing to dim
    return this.line(`✂ conversation rewound to the start of turn ${turn}`, "warn rewind-cut");
  }

  // The undo of a rewind (its event): what the rewind dimmed is back.
  undone(undoId, newUndoId) {
    const cut = this.cuts.get(undoId);
    this.cuts.delete(undoId);
    if (cut) {
      // Turns sent after the rewind are not in the conversation the undo put back.
      for (let node = cut.line.nextElementSibling; node; node = node.nextElementSibling) {
        node.classList.add("rewound");
        node.setAttribute("aria-disabled", "true");
      }
      for (const node of cut.nodes) {
        node.classList.remove("rewound");
        node.removeAttribute("aria-disabled");
        for (const button of node.querySelectorAll(".rewind-here")) button.disabled = false;
      }
      this.turnCount = cut.turnCount;
    }
    return this.line("⎌ rewind undone: the conversation (and the files) are back as they were before it", "warn rewind-cut");
  }

  // ------------------------------------------------------------ following the stream

  atBottom() {
    const log = this.log;
    return log.scrollHeight - log.scrollTop - log.clientHeight <= AT_BOTTOM;
  }

  setFollowing(following) {
    if (following === this.following) return;
    this.following = following;
    this.onFollow(following);
  }

  // A scroll, the reader's or ours. Following stops only when the reader moved up from where the
  // log was put (not when a large chunk arrived between our scroll and its event), and starts
  // again when they are back at the bottom.
  scrolled() {
    const top = this.log.scrollTop;
    if (this.atBottom()) this.setFollowing(true);
    else if (top < this.lastTop - 1) this.setFollowing(false);
    this.lastTop = top;
  }

  stick() {
    if (!this.following) return;
    this.log.scrollTop = this.log.scrollHeight;
    this.lastTop = this.log.scrollTop;
  }

  jump() {
    this.setFollowing(true);
    this.flush();
  }

  // Render the open answer and follow, once per animation frame however many frames arrived.
  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    const run = () => {
      if (!this.scheduled) return;
      this.flush();
    };
    if (typeof requestAnimationFrame === "function" && document.visibilityState !== "hidden") requestAnimationFrame(run);
    else setTimeout(run, 50);
  }

  flush() {
    this.scheduled = false;
    this.renderOpen();
    this.stick();
  }

  renderOpen() {
    const open = this.open;
    if (!open || !open.dirty) return;
    open.dirty = false;
    if (open.kind === "agent") this.renderAnswer(open);
    else open.node.textContent = open.text;
  }

  // An answer's markdown, parsed in the worker (one parse of a bubble at a time; the latest text when it is
  // back). Until the first is back the text is shown as it is; an answer whose parse overran its budget stays
  // plain text, and is not parsed again.
  renderAnswer(bubble) {
    if (bubble.plain) {
      bubble.node.textContent = bubble.text;
      return;
    }
    if (bubble.parsing) return; // its end parses the latest text again
    if (!bubble.node.hasChildNodes()) bubble.node.textContent = bubble.text;
    bubble.parsing = true;
    const text = bubble.text;
    parseMarkdown(text).then((fragment) => {
      bubble.parsing = false;
      if (fragment === null) {
        bubble.plain = true;
        bubble.node.classList.remove("md");
        bubble.node.classList.add("unparsed");
        bubble.node.title = "Shown as plain text: its markdown took too long to render";
        bubble.node.textContent = bubble.text;
      } else {
        bubble.node.replaceChildren(fragment);
        if (bubble.text !== text) this.renderAnswer(bubble);
      }
      this.stick();
    });
  }

  // The streamed bubble ends (anything else came): rendered one last time, then left alone.
  close() {
    this.renderOpen();
    this.open = null;
  }

  append(node) {
    this.log.append(node);
    this.prune();
    this.schedule();
    return node;
  }

  prune() {
    const kept = this.log.childElementCount - (this.droppedLine ? 1 : 0);
    if (kept <= MAX_ENTRIES) return;
    if (!this.droppedLine) {
      this.droppedLine = el("div", { class: "line dropped" });
      this.log.prepend(this.droppedLine);
    }
    for (let extra = kept - MAX_ENTRIES; extra > 0; extra -= 1) {
      const oldest = this.droppedLine.nextElementSibling;
      if (oldest.dataset.toolCallId) this.tools.delete(oldest.dataset.toolCallId);
      oldest.remove();
      this.dropped += 1;
    }
    this.droppedLine.textContent = `… ${this.dropped} earlier entries are no longer shown (the session's transcript keeps them)`;
  }

  line(text, kind = "note") {
    this.close();
    return this.append(el("div", { class: `line ${kind}`, text }));
  }

  feed(frame) {
    const data = frame.data && typeof frame.data === "object" ? frame.data : {};
    const id = frame.promptId;
    if (frame.type === "mid_turn_message_injected") { // waiting mid-turn messages (pending under their ids) taken
      for (const taken of Array.isArray(data.messageIds) ? data.messageIds : []) this.waiting.delete(taken);
    }
    if (frame.type === "pending_prompt_added" && id) this.waiting.add(id);
    else if ((frame.type === "pending_prompt_started" || frame.type === "session_update") && id) this.waiting.delete(id);
    else if ((frame.type === "turn_complete" || frame.type === "turn_error") && id && this.waiting.delete(id)) {
      return; // a queued prompt removed before it ran (its `cancelled` end): the queue showed it leave
    }
    const handler = HANDLERS[frame.type];
    if (handler) handler.call(this, data, frame);
    this.schedule();
  }

  stream(kind, text) {
    if (!text) return;
    if (!this.open || this.open.kind !== kind) {
      this.close();
      const node = el("div", { class: kind === "agent" ? "msg agent md" : `msg ${kind}` });
      this.open = { kind, node: this.append(node), text: "", dirty: false };
    }
    this.open.text += text;
    this.open.dirty = true;
    this.schedule();
  }

  update(update, promptId) {
    const meta = update._meta && typeof update._meta === "object" ? update._meta : {};
    const text = textOf(update.content);
    switch (update.sessionUpdate) {
      case "agent_message_chunk":
        if (meta.usage && !text) return; // a model call's usage: the header shows the total
        if (meta.source === GUARD_SOURCE) return this.guard(meta, text);
        if (meta.source === "daemon") return this.line(`! ${text}`, "warn");
        if (meta.source === "background_notification") { // an automatic turn's background result
          return this.user(text, { source: "notification", taskId: meta.backgroundTask?.taskId }, promptId);
        }
        if (meta.qwenDiscreteMessage) return this.line(text, "plain");
        return this.stream("agent", text);
      case "agent_thought_chunk":
        return this.stream("thought", text);
      case "user_message_chunk":
        return this.user(text, meta, promptId);
      case "tool_call":
      case "tool_call_update":
        return this.tool(update);
      case "plan":
        return this.plan(update.entries);
      case "current_mode_update":
        return this.line(`approval mode: ${update.currentModeId}`);
      default:
        return undefined;
    }
  }

  guard(meta, text) {
    const { attempt, maxAttempts, unfinishedCount } = meta;
    const exhausted = text.includes("stopped after");
    const said = exhausted
      ? `⟳ todo stop guard stopped after ${attempt} of ${maxAttempts} attempts (${unfinishedCount} unfinished)`
      : `⟳ todo stop guard — attempt ${attempt} of ${maxAttempts} (${unfinishedCount} unfinished)`;
    this.line(said, exhausted ? "guard exhausted" : "guard");
  }

  user(text, meta, promptId) {
    const source = meta.source;
    if (source === undefined || source === null || source === "user" || source === "prompt") {
      this.close();
      const bubble = el("div", { class: "msg user", text });
      const command = SLASH_COMMAND.exec(text.trim());
      if (command) { // a slash command adds no turn; /clear drops them all: the numbering starts again
        this.append(bubble);
        if (command[1] === "clear") this.forgetTurns();
        return;
      }
      // A user turn, numbered as a rewind counts them (from 0) while this page saw every turn; the
      // daemon's checkpoint listing has the last word (app.js asks it by promptId).
      const index = this.turnCount;
      this.turnCount += 1;
      const entry = el("div", { class: "user-turn", dataset: { turn: String(index), promptId: promptId || "" } }, bubble);
      entry.append(el("div", { class: "turn-tools" },
        el("button", { type: "button", class: "rewind-here", title: "Rewind the conversation (and the files) to the start of this turn",
          onclick: () => this.onRewind(entry) }, "Rewind here")));
      this.append(entry);
      return;
    }
    // An automatic turn (a task notification, a wakeup, a cron job): its first line of prose.
    const first = text.split("\n").map((l) => l.trim()).find((l) => l && !l.startsWith("<")) || "";
    const task = meta.taskId ? ` (${meta.taskId})` : "";
    this.line(`↳ ${source}${task}: ${short(first, 160)}`, "automatic");
  }

  tool(update) {
    const id = String(update.toolCallId);
    let tool = this.tools.get(id);
    if (!tool) {
      const status = el("span", { class: "badge" });
      const output = el("pre", { class: "output", hidden: true });
      const card = el("div", { class: "tool", dataset: { toolCallId: id } },
        el("div", { class: "tool-head" },
          el("span", { class: "tool-title", text: titleOf(update.title || this.toolNames.get(id) || "tool") }),
          update.kind ? el("span", { class: "muted", text: update.kind }) : null,
          status),
        update.rawInput !== undefined ? toolInput(update.rawInput) : null,
        output);
      tool = { card, status, output, title: card.querySelector(".tool-title") };
      this.tools.set(id, tool);
      this.close();
      this.append(card);
    }
    if (update.title) tool.title.textContent = titleOf(update.title);
    if (update.status) {
      tool.status.textContent = update.status;
      tool.card.dataset.status = update.status;
    }
    const text = toolOutput(update.content);
    if (text) {
      tool.output.textContent = text;
      tool.output.hidden = false;
    }
    if (TERMINAL.has(update.status)) {
      this.close();
      this.tools.delete(id); // no update follows a terminal one
      this.toolNames.delete(id);
    }
  }

  // The turn ended with tool calls still shown running (a cancel, a daemon restart can end a turn without a
  // last update of its call): their cards say so rather than stay "in_progress".
  endTools(reason) {
    for (const tool of this.tools.values()) {
      tool.status.textContent = `not finished (${reason})`;
      tool.card.dataset.status = "unfinished";
    }
    this.tools.clear();
    this.toolNames.clear();
  }

  plan(entries) {
    const items = Array.isArray(entries) ? entries.filter((e) => e && typeof e === "object") : [];
    const done = items.filter((e) => e.status === "completed").length;
    this.close();
    this.append(el("div", { class: "plan" },
      el("div", { class: "plan-head", text: `☰ Plan (${done}/${items.length} done)` }),
      el("ul", {}, items.map((e) => el("li", { class: e.status, text: `${PLAN_MARKS[e.status] || "·"} ${e.content ?? ""}` })))));
  }
}

// A tool call's title on one line, bounded: a shell call's title is its command, of any length.
function titleOf(title) {
  return visible(short(title, TITLE_CHARS));
}

// A tool card's input, bounded (a write's input is the whole file), and a line saying what is not shown.
function toolInput(raw) {
  const { text, note } = inputPreview(raw);
  return [el("code", { class: "tool-input", text }), note ? el("div", { class: "tool-input-note", text: note }) : null];
}

function usageText(usage) {
  return usage && Number.isInteger(usage.totalTokens) ? ` · ${usage.totalTokens.toLocaleString("en")} tokens` : "";
}

const HANDLERS = {
  session_update(data, frame) {
    this.update(data.update && typeof data.update === "object" ? data.update : {}, frame.promptId);
  },
  turn_complete(data) {
    const reason = data.stopReason;
    this.endTools(`turn ${reason}`);
    const hook = data.hookStopReason ? ` (hook: ${data.hookStopReason})` : "";
    const tokens = usageText(data.usage);
    if (reason === "end_turn") this.line(`✓ turn complete${hook}${tokens}`, "turn-end");
    else if (reason === "cancelled") this.line(`✗ turn cancelled${tokens}`, "turn-end warn");
    else if (reason === "max_tokens") {
      const limit = data.tokenLimit || {};
      this.line(`✗ turn stopped: max_tokens — ${limit.message || "out of tokens"}${tokens}`, "turn-end warn");
    } else if (reason === "max_turn_requests") {
      this.line(`✗ turn stopped by loop protection (max_turn_requests)${tokens}`, "turn-end warn");
    } else this.line(`✗ turn stopped: ${reason}${hook}${tokens}`, "turn-end warn");
  },
  turn_error(data) {
    this.endTools("turn failed");
    this.line(`✗ turn failed: ${data.message} [${data.code}]`, "turn-end error");
  },
  mid_turn_message_injected(data) {
    for (const message of Array.isArray(data.messages) ? data.messages : []) {
      this.line(`↳ mid-turn message taken: ${short(message, 200)}`, "automatic");
    }
  },
  permission_request(data) {
    const call = data.toolCall || {};
    // A page that joined mid-call (the call's tool_call left the ring before the replay) knows it by id only.
    if (call.toolCallId !== undefined && call.title) {
      this.toolNames.set(String(call.toolCallId), call.title);
      const known = this.tools.get(String(call.toolCallId));
      if (known && known.title.textContent === "tool") known.title.textContent = titleOf(call.title);
    }
    this.options.set(data.requestId, Array.isArray(data.options) ? data.options : []);
    this.line(`? permission: ${call.kind ? `${call.kind}: ` : ""}${titleOf(call.title || "a tool call")}`, "asked");
  },
  permission_resolved(data) {
    const outcome = data.outcome || {};
    const option = (this.options.get(data.requestId) || []).find((o) => o.optionId === outcome.optionId);
    this.options.delete(data.requestId);
    if (outcome.outcome !== "selected") this.line("→ cancelled (no vote)", "asked");
    else this.line(`→ ${option ? optionName(option) : outcome.optionId}`, "asked");
  },
  background_task(data) {
    const who = data.kind === "agent" ? `⧉ subagent ${String(data.label || "").split(":")[0].trim()}` : `⚙ ${data.kind} ${data.taskId}`;
    if (data.status === "started") this.line(`${who} started: ${short(data.label, 120)}`, "task");
    else if (data.status === "finished") {
      const code = data.exitCode !== undefined && data.exitCode !== null ? ` (exit ${data.exitCode})` : "";
      this.line(`${who} ${data.state || "finished"}${code}`, "task");
    } else if (data.status === "notification_dropped") this.line(`⚙ the notification of ${data.taskId} was dropped (${data.reason})`, "warn");
  },
  hook_result(data) {
    for (const message of data.systemMessages || []) this.line(`⚑ ${data.hookEvent} hook: ${message}`, "hook");
    for (const failure of data.failures || []) this.line(`⚑ ${data.hookEvent} hook failed: ${failure}`, "hook error");
    if (data.stopReason) this.line(`⚑ ${data.hookEvent} hook stopped the turn: ${data.stopReason}`, "hook");
  },
  followup_suggestion(data) {
    const suggestions = (data.suggestions || []).map(String);
    if (suggestions.length) this.line(`suggestions: ${suggestions.join(" · ")}`);
  },
  history_truncated(data) {
    this.line(`(earlier history not replayed: ${data.truncatedEvents ?? "some"} events)`);
  },
  client_evicted() {
    this.line("(this page fell behind the stream; catching up)", "warn");
  },
  conversation_rewound(data) {
    if (Number.isInteger(data.turn)) this.rewoundTo(data.turn, typeof data.undoId === "string" ? data.undoId : null);
  },
  rewind_undone(data) {
    this.undone(String(data.undoId), data.newUndoId);
  },
  session_closed(data) {
    if (data.reason === "daemon_shutdown") this.line("the daemon stopped; reconnecting when it is back", "warn");
    else this.line(`session closed (${data.reason})`, "warn");
  },
};
