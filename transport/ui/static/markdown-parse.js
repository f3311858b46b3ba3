// Markdown to an HTML string, without the DOM: marked (GFM), any raw HTML in the text escaped (shown as the
// characters it is, never as markup), code blocks highlighted by highlight.js. markdown.js sanitizes what this
// makes; md-worker.js runs it off the page's thread (a parse has no bound on its time: marked's emphasis
// tokenizer takes minutes over some 60 KB of `*a_*a_...`, and the page would freeze with it).

import { Marked } from "./vendor/marked.esm.js";
import hljs from "./vendor/highlight.core.min.js";
import bash from "./vendor/hljs-bash.min.js";
import css from "./vendor/hljs-css.min.js";
import diff from "./vendor/hljs-diff.min.js";
import go from "./vendor/hljs-go.min.js";
import javascript from "./vendor/hljs-javascript.min.js";
import json from "./vendor/hljs-json.min.js";
import plaintext from "./vendor/hljs-plaintext.min.js";
import python from "./vendor/hljs-python.min.js";
import rust from "./vendor/hljs-rust.min.js";
import shell from "./vendor/hljs-shell.min.js";
import sql from "./vendor/hljs-sql.min.js";
import typescript from "./vendor/hljs-typescript.min.js";
import xml from "./vendor/hljs-xml.min.js";
import yaml from "./vendor/hljs-yaml.min.js";

const LANGUAGES = { bash, css, diff, go, javascript, json, plaintext, python, rust, shell, sql, typescript, xml, yaml };
for (const [name, language] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, language);

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
export const escapeHtml = (text) => String(text ?? "").replace(/[&<>"']/g, (c) => ESCAPES[c]);

function highlighted(code, lang) {
  const name = String(lang || "").trim().split(/\s+/)[0].toLowerCase();
  if (name && hljs.getLanguage(name)) {
    try {
      return { html: hljs.highlight(code, { language: name, ignoreIllegals: true }).value, name };
    } catch {
      // fall through: shown plain
    }
  }
  return { html: escapeHtml(code), name: "" };
}

const marked = new Marked({
  gfm: true,
  breaks: false,
  async: false,
  renderer: {
    html({ text }) { // raw HTML in model text: its characters, never markup
      return escapeHtml(text);
    },
    code({ text, lang }) {
      const { html, name } = highlighted(text.replace(/\n$/, ""), lang);
      const label = name ? ` language-${escapeHtml(name)}` : "";
      return `<pre><code class="hljs${label}">${html}</code></pre>\n`;
    },
    image({ href, text }) { // no images from model text (they would be fetched): a link instead
      return `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`;
    },
  },
});

// The HTML of ``text`` (not yet sanitized: markdown.js does that).
export function markdownHtml(text) {
  try {
    return marked.parse(String(text ?? "")).trim();
  } catch {
    return `<p>${escapeHtml(text)}</p>`;
  }
}
