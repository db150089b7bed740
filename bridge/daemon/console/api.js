// The daemon's /v1 API, with the page's key.

import { $, state } from "./state.js";

export function authHeaders(extra = {}) {
  const headers = { ...extra };
  if (state.key) headers.Authorization = "Bearer " + state.key;
  return headers;
}

// A key may be refused a part of the page (403: its caller lacks the permission); that part
// is left out, not shown as an error.
export function forbidden(error) {
  return Boolean(error) && error.status === 403;
}

export async function api(path, options = {}) {
  const headers = authHeaders(options.headers || {});
  if (options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) {
    $("key-form").hidden = false;
    const error = new Error("this daemon needs an API key");
    error.code = "unauthorized";
    throw error;
  }
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    let code = "http_" + response.status;
    try {
      const body = await response.json();
      if (body.error) { message = body.error.message; code = body.error.code; }
    } catch (ignored) { /* not JSON */ }
    const error = new Error(message);
    error.code = code;
    error.status = response.status;
    throw error;
  }
  return response.json();
}
