// The markdown parser, off the page's thread (markdown.js, parseMarkdown): it says {ready: true} once its modules
// are loaded, then answers each {id, text} with {id, html}. The page gives each parse a time budget and ends
// this worker when a parse overruns it.

import { markdownHtml } from "./markdown-parse.js";

self.onmessage = (event) => {
  const { id, text } = event.data || {};
  self.postMessage({ id, html: markdownHtml(text) });
};
self.postMessage({ ready: true });
