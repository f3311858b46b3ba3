// Markdown of the model's answers, as inert DOM: marked (GFM) renders it, with any raw HTML in
// the text escaped (it is shown as the characters it is, never as markup), code blocks highlighted
// by highlight.js (markdown-parse.js), and DOMPurify keeps only a fixed set of plain tags and attributes
// as a second line. The libraries are vendored plain files (vendor/README.md): nothing comes from elsewhere,
// and the page's Content-Security-Policy (no inline script, scripts from the daemon only) stands.
//
// The page parses in a worker (md-worker.js), each parse with a time budget: a parse has no bound on its
// time of its own (marked takes minutes over some 60 KB of `*a_*a_...`, which a model can write), and one
// on the page's thread would freeze the page — its permission requests, its Cancel — for as long. An answer
// whose parse overruns the budget is shown as plain text, and the worker is ended and started anew.

import DOMPurify from "./vendor/purify.es.js";
import { escapeHtml } from "./markdown-parse.js";

export { escapeHtml };

export const PARSE_BUDGET_MS = 2000; // of one parse in the worker (a long ordinary answer takes some 50 ms)
const WORKER_LOAD_MS = 20000; // for the worker to load its modules; after that, answers are plain text

const PURIFY = {
  ALLOWED_TAGS: ["a", "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "s", "code",
    "pre", "span", "blockquote", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td", "sup", "sub"],
  ALLOWED_ATTR: ["href", "title", "class", "align", "start"],
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i,
  RETURN_DOM_FRAGMENT: true,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

// HTML made by markdownHtml as a DocumentFragment of plain, sanitized nodes.
function sanitize(html) {
  return DOMPurify.sanitize(html, PURIFY);
}

// The one worker of the page: parses one text at a time, in the order asked, each within PARSE_BUDGET_MS.
const parser = {
  worker: null,
  ready: false,
  broken: false, // the worker could not be started or loaded: every answer is plain text
  queue: [], // {text, resolve}
  busy: null, // {id, timer, resolve}: the parse in the worker
  seq: 0,
  loading: null, // the timer of the worker's loading

  parse(text) {
    return new Promise((resolve) => {
      this.queue.push({ text, resolve });
      this.pump();
    });
  },

  pump() {
    if (this.busy) return;
    if (this.broken) {
      for (const job of this.queue.splice(0)) job.resolve(null);
      return;
    }
    if (!this.queue.length) return;
    if (!this.worker) this.start();
    if (!this.ready) return; // pumped again when the worker says it is ready
    const job = this.queue.shift();
    const id = ++this.seq;
    this.busy = {
      id,
      resolve: job.resolve,
      timer: setTimeout(() => { // overran: the worker is ended mid-parse, the text shown plain
        this.stop();
        this.done(id, null);
      }, PARSE_BUDGET_MS),
    };
    this.worker.postMessage({ id, text: job.text });
  },

  done(id, html) {
    const busy = this.busy;
    if (!busy || busy.id !== id) return;
    clearTimeout(busy.timer);
    this.busy = null;
    busy.resolve(html);
    this.pump();
  },

  start() {
    let worker;
    try {
      worker = new Worker(new URL("./md-worker.js", import.meta.url), { type: "module" });
    } catch {
      this.fail();
      return;
    }
    this.worker = worker;
    this.ready = false;
    this.loading = setTimeout(() => this.fail(), WORKER_LOAD_MS);
    worker.onmessage = (event) => {
      const data = event.data || {};
      if (data.ready) {
        clearTimeout(this.loading);
        this.ready = true;
        this.pump();
      } else if (this.busy && data.id === this.busy.id) {
        this.done(data.id, typeof data.html === "string" ? data.html : null);
      }
    };
    worker.onerror = (event) => {
      event.preventDefault?.();
      if (!this.ready) this.fail();
      else if (this.busy) {
        const id = this.busy.id;
        this.stop();
        this.done(id, null);
      }
    };
  },

  stop() {
    clearTimeout(this.loading);
    if (this.worker) this.worker.terminate();
    this.worker = null;
    this.ready = false;
  },

  fail() {
    this.stop();
    this.broken = true;
    this.pump();
  },
};

// The markdown of ``text`` as sanitized DOM, parsed in the worker; null when the parse overran its budget (or
// there is no worker): show the text as plain text then.
export async function parseMarkdown(text) {
  const html = await parser.parse(String(text ?? ""));
  return html === null ? null : sanitize(html);
}
