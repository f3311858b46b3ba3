// The daemon's REST API as the page uses it: the token, and requests that send it.
//
// The token comes from the URL fragment once (#token=...; a fragment never reaches a
// server or its logs), is taken out of the address bar at once, and is kept in this
// tab's sessionStorage: another tab, or the page after the tab closes, asks again.

const KEY = "trellis.token";

export class Unauthorized extends Error {}

export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
    this.paths = body && Array.isArray(body.paths) ? body.paths.map(String) : []; // files_changed_outside
  }
}

// True when the fragment held a token (now kept, and gone from the address bar).
export function takeTokenFromFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  if (token) {
    sessionStorage.setItem(KEY, token);
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
  }
  return Boolean(token);
}

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value),
  clear: () => sessionStorage.removeItem(KEY),
};

export function headers(extra = {}) {
  const value = token.get();
  return value ? { Authorization: `Bearer ${value}`, ...extra } : { ...extra };
}

// One request; the JSON answer (null for 204). 401 raises Unauthorized, other errors ApiError.
export async function api(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (response.status === 401) throw new Unauthorized("the daemon refused the token");
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { error: text.slice(0, 200) };
  }
  if (!response.ok) throw new ApiError(response.status, parsed);
  return parsed;
}

export const path = (...parts) => "/" + parts.map(encodeURIComponent).join("/");

export function textPrompt(text) {
  return { prompt: [{ type: "text", text }] };
}
