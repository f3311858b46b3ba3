// Markdown of the model's answers, as inert DOM: marked (GFM) renders it, with any raw HTML in
// the text escaped (it is shown as the characters it is, never as markup), code blocks highlighted
// by highlight.js, and DOMPurify keeps only a fixed set of plain tags and attributes as a second
// line. The libraries are vendored plain files (vendor/README.md): nothing comes from elsewhere,
// and the page's Content-Security-Policy (no inline script, scripts from the daemon only) stands.

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";
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

// The markdown of ``text`` as a DocumentFragment of plain, sanitized nodes.
export function renderMarkdown(text) {
  let html;
  try {
    html = marked.parse(String(text ?? "")).trim();
  } catch {
    html = `<p>${escapeHtml(text)}</p>`;
  }
  return DOMPurify.sanitize(html, PURIFY);
}
