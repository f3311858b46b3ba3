// A session's event stream (GET /session/:id/events), read with fetch — EventSource cannot
// send an Authorization header — and resumed after a dropped connection.
//
// The first connection asks for everything (Last-Event-ID: 0): the ring's events, or the
// daemon's state_resync_required and its compacted replay. A reconnection sends the last id
// read and the epoch it came from, so the daemon replays exactly what was missed. When the
// daemon cannot (another epoch after a restart, events evicted from its ring) it says
// state_resync_required and replays the session from its start: the view is cleared then,
// and rebuilt, so nothing is shown twice either way.

import { headers, path, Unauthorized } from "./api.js";

const BACKOFF_MS = [250, 500, 1000, 2000, 4000];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class SessionStream {
  // handlers: frame(frame), resync(frame), replayed(), state("connected" | "reconnecting" | "closed"),
  // unauthorized(), gone() -> Promise<boolean> (true: the session is back, reconnect)
  // resume: {lastId, epoch} of an earlier stream of this session, to go on from where it stopped.
  constructor(sessionId, handlers, resume = null) {
    this.sessionId = sessionId;
    this.on = handlers;
    this.lastId = resume ? resume.lastId : 0;
    this.epoch = resume ? resume.epoch : null;
    this.stopped = false;
    this.controller = null;
  }

  start() {
    this.run();
    return this;
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
  }

  async run() {
    let failures = 0;
    while (!this.stopped) {
      this.controller = new AbortController();
      let outcome;
      try {
        outcome = await this.connectOnce(this.controller.signal);
      } catch (error) {
        if (error instanceof Unauthorized) {
          this.on.unauthorized();
          return;
        }
        outcome = "dropped";
      }
      if (this.stopped) return;
      if (outcome === "closed") {
        this.on.state("closed");
        return;
      }
      if (outcome === "gone" && !(await this.on.gone())) {
        this.on.state("closed");
        return;
      }
      if (outcome === "delivered") failures = 0;
      this.on.state("reconnecting");
      await sleep(BACKOFF_MS[Math.min(failures, BACKOFF_MS.length - 1)]);
      failures += 1;
    }
  }

  // One connection, to its end: "closed" (session_closed), "gone" (404), "delivered" (it was up
  // and ended; "shutdown" too: the daemon stopped), or "dropped" (refused, or failed before it was up).
  async connectOnce(signal) {
    const extra = { Accept: "text/event-stream", "Last-Event-ID": String(this.lastId) };
    if (this.epoch) extra["X-Qwen-Event-Epoch"] = this.epoch;
    const response = await fetch(path("session", this.sessionId, "events"), {
      headers: headers(extra), signal, cache: "no-store",
    });
    if (response.status === 401) throw new Unauthorized("the daemon refused the token");
    if (response.status === 404) return "gone";
    if (!response.ok || !response.body) return "dropped";
    // The epoch of the ids this connection sends; a resync below starts counting on it.
    this.streamEpoch = response.headers.get("X-Qwen-Event-Epoch");
    if (!this.epoch) this.epoch = this.streamEpoch;
    this.on.state("connected");
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
          const said = this.deliver(block);
          if (said === "closed") return "closed";
          if (said === "shutdown") return "delivered";
        }
      }
    } catch (error) {
      if (this.stopped) return "dropped";
    }
    return "delivered";
  }

  deliver(block) {
    const data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (!data.length) return null; // a comment (keepalive) or the retry hint
    let frame;
    try {
      frame = JSON.parse(data.join("\n"));
    } catch {
      return null;
    }
    if (frame.type === "state_resync_required") {
      this.lastId = 0; // what follows is the session from its start, on the daemon's epoch
      this.epoch = this.streamEpoch;
      this.on.resync(frame);
      return null;
    }
    if (typeof frame.id === "number") {
      if (frame.id <= this.lastId) return null; // already shown (a replay overlapping what was read)
      this.lastId = frame.id;
    }
    if (frame.type === "replay_complete") {
      this.on.replayed(frame);
      return null;
    }
    this.on.frame(frame);
    // A daemon that shuts down closes its sessions; they are restorable when it is back: reconnect.
    if (frame.type === "session_closed") return frame.data?.reason === "daemon_shutdown" ? "shutdown" : "closed";
    return null;
  }
}
