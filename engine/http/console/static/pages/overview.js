// Overview: the server's state, its queue and recent throughput, and every model with its tier and weights.
import { h, table, fmt, bytes, errorBox } from "../dom.js";

const POLL_MS = 2000;
const KEEP = 60; // points in the throughput line (two minutes)

function spark(values) {
  const w = 300, hgt = 40, max = Math.max(1e-9, ...values);
  const pts = values.map((v, i) => `${(i / Math.max(1, KEEP - 1)) * w},${hgt - (v / max) * (hgt - 4) - 2}`).join(" ");
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts);
  svg.append(line);
  return svg;
}

function stat(title, value, unit) {
  return h("div", { class: "card" }, h("div", { class: "muted" }, title), h("div", { class: "stat" }, value, " ", h("small", {}, unit || "")));
}

function render(root, ctx) {
  const history = [];
  const body = h("div", {}, h("p", { class: "muted" }, "Loading status…"));
  root.append(h("h1", {}, "Overview"), body);

  async function refresh() {
    let s;
    try { s = await ctx.api.get("/v1/status"); } catch (e) { body.replaceChildren(errorBox(e)); return; }
    const r = s.rates || {};
    history.push(r.items || 0);
    if (history.length > KEEP) history.shift();
    const q = s.queue;
    const cards = h("div", { class: "grid" },
      stat("server", s.status, `${s.mode}, ${s.device}`),
      stat("queue pending", fmt(q.pending), `${q.kind}`),
      stat("held / dead letters", `${fmt(q.held)} / ${fmt(q.dead_letters)}`, ""),
      stat("requests", fmt(r.requests === null ? null : r.requests, 2), r.window_s ? "/s" : "(measuring)"),
      stat("items", fmt(r.items === null ? null : r.items, 2), r.window_s ? "/s" : ""),
      stat("tokens", fmt(r.tokens === null ? null : r.tokens, 1), r.window_s ? "/s" : ""));
    const tiers = table(["tier", "models", "bytes", "budget"],
      Object.entries(s.tiers).map(([t, v]) => [t, String(v.models), t === "disk" ? "–" : bytes(v.bytes), bytes(v.budget)]), [1, 2, 3]);
    const rows = s.models.map((m) => [
      m.name,
      m.tasks.join(", "),
      h("span", { class: `pill ${m.loaded ? "device" : m.tier}` }, m.loaded ? "loaded (device)" : m.tier),
      h("span", { class: `pill ${m.weights.available ? "" : "missing"}` }, m.weights.source),
    ]);
    body.replaceChildren(cards,
      h("div", { class: "card" }, h("h2", {}, "Throughput (items/s, last two minutes)"), spark(history),
        h("div", { class: "muted" }, `totals: ${fmt(s.totals.requests)} requests, ${fmt(s.totals.errors)} errors, `
          + `${fmt(s.totals.items)} items, ${fmt(s.totals.tokens)} tokens`)),
      h("div", { class: "card" }, h("h2", {}, "Residency"), tiers),
      h("div", { class: "card", id: "models" }, h("h2", {}, `Models (${s.models.length})`),
        table(["model", "tasks", "where", "weights"], rows)));
  }

  refresh();
  const timer = setInterval(refresh, POLL_MS);
  return () => clearInterval(timer);
}

export default { id: "overview", title: "Overview", available: () => true, render };
