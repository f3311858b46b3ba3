// Building DOM nodes. Text is always set as text (textContent), never parsed as HTML: what
// the page shows of a session — model text, command output, file names — cannot inject markup.

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function short(text, width) {
  const line = String(text ?? "").split(/\s+/).filter(Boolean).join(" ");
  return line.length <= width ? line : line.slice(0, Math.max(1, width - 1)) + "…";
}

export function textOf(content) {
  return content && content.type === "text" && typeof content.text === "string" ? content.text : "";
}

// A tool call's arguments: a shell's command, else compact JSON.
export function inputSummary(raw) {
  if (raw === undefined || raw === null) return "";
  if (typeof raw === "object" && typeof raw.command === "string") {
    return raw.command + (raw.run_in_background ? "  (background)" : "");
  }
  try {
    return JSON.stringify(raw);
  } catch {
    return String(raw);
  }
}

const INPUT_LINES = 12; // lines of a tool call's input its card shows (a write's whole file is its input)
const INPUT_CHARS = 1500; // and characters

// What a tool call's card shows of its input: at most its first INPUT_LINES lines and INPUT_CHARS characters,
// its hidden characters made visible (as a permission request's diff); ``note`` says what is left out, or "".
export function inputPreview(raw) {
  const whole = inputSummary(raw);
  const lines = linesOf(whole);
  const kept = lines.slice(0, INPUT_LINES).join("\n");
  if (kept.length > INPUT_CHARS) { // counted in characters: they say how much more there is, lines or not
    return { text: visible(kept.slice(0, INPUT_CHARS)), note: `… ${thousands(whole.length - INPUT_CHARS)} more characters not shown` };
  }
  if (lines.length > INPUT_LINES) {
    return { text: visible(kept), note: `… ${thousands(lines.length - INPUT_LINES)} more lines not shown` };
  }
  return { text: visible(whole), note: "" };
}

const thousands = (n) => n.toLocaleString("en");

// The text of a tool call's content: text blocks, and an edit's diff as changed lines.
export function toolOutput(content) {
  const parts = [];
  for (const item of Array.isArray(content) ? content : []) {
    if (item && item.type === "content") parts.push(textOf(item.content).replace(/\s+$/, ""));
    else if (item && item.type === "diff") parts.push(diffLines(item));
  }
  return parts.filter(Boolean).join("\n");
}

const DIFF_LINES = 200; // changed lines shown of one diff; the rest are counted
const DIFF_LINE_CHARS = 400; // characters of one changed line shown in a permission request's diff

// A text's lines; the newline that ends its last line starts no line of its own ("a\n" is one line).
function linesOf(text) {
  const lines = String(text).split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  return lines;
}

// An ACP diff ({path, oldText, newText}) as its changed lines, the lines both texts share at their start and
// end left out (an edit's diff is the whole file before and after): {where, changed: ["- old", "+ new", ...]}.
export function changedLines(diff) {
  const created = diff.oldText === null || diff.oldText === undefined;
  const before = created ? [] : linesOf(diff.oldText);
  const after = diff.newText === null || diff.newText === undefined || diff.newText === "" ? [] : linesOf(diff.newText);
  let head = 0;
  while (head < before.length && head < after.length && before[head] === after[head]) head += 1;
  let tail = 0;
  while (tail < before.length - head && tail < after.length - head
         && before[before.length - 1 - tail] === after[after.length - 1 - tail]) tail += 1;
  const changed = [
    ...before.slice(head, before.length - tail).map((line) => `- ${line}`),
    ...after.slice(head, after.length - tail).map((line) => `+ ${line}`),
  ];
  return { where: created ? "(new file)" : `(from line ${head + 1})`, changed };
}

// An ACP diff as "--- path" and its changed lines (at most DIFF_LINES of them; the rest counted).
export function diffLines(diff) {
  const { where, changed } = changedLines(diff);
  const shown = changed.slice(0, DIFF_LINES);
  if (changed.length > shown.length) shown.push(`… ${changed.length - shown.length} more changed lines`);
  return [`--- ${diff.path} ${where}`, ...shown].join("\n");
}

// Characters a file can hide its text with, made visible: C0 controls but tab and newline, DEL and C1 as
// their pictures or codes (a CR would rewrite nothing here, but hides where a line was cut); the
// bidirectional overrides, isolates and marks as their code points (they reorder what is shown, "Trojan
// source"), and the line and paragraph separators (a line break that is not one to the diff).
const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
export function visible(text) {
  return String(text).replace(HIDDEN, (c) => {
    const code = c.charCodeAt(0);
    if (code < 0x20) return String.fromCharCode(0x2400 + code);
    if (code === 0x7f) return "\u2421";
    if (code <= 0x9f) return `\\x${code.toString(16)}`;
    return `⟨U+${code.toString(16).toUpperCase()}⟩`;
  });
}

// What a permission request's diff shows before the vote: "--- path" and its changed lines, at most
// DIFF_LINES of them, each cut at DIFF_LINE_CHARS; ``hidden`` counts the lines not shown, or shown in part.
export function diffPreview(diff) {
  const { where, changed } = changedLines(diff);
  const shown = changed.slice(0, DIFF_LINES);
  let hidden = changed.length - shown.length;
  const lines = shown.map((line) => {
    if (line.length <= DIFF_LINE_CHARS) return line;
    hidden += 1;
    return `${line.slice(0, DIFF_LINE_CHARS)}… [${line.length - DIFF_LINE_CHARS} more characters]`;
  });
  if (!changed.length) lines.push("(no change to the file's text)");
  return { text: visible([`--- ${diff.path} ${where}`, ...lines].join("\n")), hidden, total: changed.length };
}

// A permission option's button label: by its kind, so that the names are always the same, and for an
// "always" option the rules it grants, as the daemon names them after ": " ("Always allow in this session:
// Bash(git log:*)"): an "always" is only as safe as its rule, so the button says which.
const OPTION_NAMES = { allow_once: "Allow", allow_always: "Always allow", reject_once: "Reject",
  reject_always: "Always reject" };
const RULE_CHARS = 120; // of the rules an "always" button shows (the daemon's name keeps at most 300)

export function optionName(option) {
  const named = OPTION_NAMES[option.kind];
  if (!named) return visible(String(option.name || option.optionId));
  const name = typeof option.name === "string" ? option.name : "";
  const rules = option.kind.endsWith("_always") && name.includes(": ") ? name.slice(name.indexOf(": ") + 2) : "";
  // the rules are made of the model's command: their hidden characters shown, as the request's title
  return rules ? `${named}: ${visible(short(rules, RULE_CHARS))}` : named;
}
