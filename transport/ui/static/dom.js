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

// A tool call's arguments on one line: a shell's command, else compact JSON.
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

// The text of a tool call's content: text blocks; a diff named by its path.
export function toolOutput(content) {
  const parts = [];
  for (const item of Array.isArray(content) ? content : []) {
    if (item && item.type === "content") parts.push(textOf(item.content));
    else if (item && item.type === "diff") parts.push(`(diff of ${item.path})`);
  }
  return parts.join("\n").replace(/\s+$/, "");
}

// A permission option's button label: by its kind, so that the names are always the same.
const OPTION_NAMES = { allow_once: "Allow", allow_always: "Always allow", reject_once: "Reject",
  reject_always: "Always reject" };

export function optionName(option) {
  return OPTION_NAMES[option.kind] || option.name || option.optionId;
}
