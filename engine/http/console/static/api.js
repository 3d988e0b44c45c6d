// The API as the console uses it: JSON in and out, the key (if any) from this tab's session storage.
const KEY = "shoal.apiKey";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(`${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

export const api = {
  key() { return sessionStorage.getItem(KEY); },
  setKey(key) { key ? sessionStorage.setItem(KEY, key) : sessionStorage.removeItem(KEY); },

  async call(method, path, body) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const key = this.key();
    if (key) headers.Authorization = `Bearer ${key}`;
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    if (!res.ok) {
      const d = (data && (data.detail || data.error)) || {};
      throw new ApiError(res.status, d.code || `HTTP_${res.status}`, d.message || text || res.statusText);
    }
    return data;
  },
  get(path) { return this.call("GET", path); },
  post(path, body) { return this.call("POST", path, body); },
};
