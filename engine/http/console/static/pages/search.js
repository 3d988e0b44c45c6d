// Search: query a collection ingested with `shoal ingest`, when the server was started with `shoal serve --db`.
import { h, errorBox } from "../dom.js";

function render(root, ctx) {
  const info = ctx.search;
  const coll = h("select", {}, (info.collections.length ? info.collections : [info.collection]).map(
    (c) => h("option", { value: c, selected: c === info.collection }, c)));
  const query = h("input", { placeholder: "what are you looking for?", id: "search-query" });
  const mode = h("select", {}, ["hybrid", "dense", "text"].map((m) => h("option", { value: m }, m)));
  const k = h("input", { type: "number", value: "5", min: "1", max: "50" });
  const out = h("div", { class: "card", id: "search-result" }, h("p", { class: "muted" }, `store: ${info.db}`));
  const run = h("button", { type: "submit" }, "Search");
  async function go(ev) {
    ev.preventDefault();
    if (!query.value.trim()) return;
    run.disabled = true;
    try {
      const r = await ctx.api.post("/v1/search",
        { query: query.value, collection: coll.value, mode: mode.value, top_k: Number(k.value) || 5 });
      out.replaceChildren(h("p", { class: "muted" }, `${r.hits.length} ${r.hits.length === 1 ? "hit" : "hits"}`),
        ...r.hits.map((x) => h("div", { class: "hit" },
          h("div", { class: "meta" }, [x.source, x.pages && x.pages.length ? `p.${x.pages.join(",")}` : "",
            (x.heading_path || []).join(" > "), `score ${x.score.toFixed(4)}`].filter(Boolean).join("  ·  ")),
          h("div", {}, x.text.length > 600 ? x.text.slice(0, 600) + "…" : x.text))));
    } catch (e) { out.replaceChildren(errorBox(e)); }
    run.disabled = false;
  }
  root.append(h("h1", {}, "Search"), h("form", { class: "card", onsubmit: go },
    h("div", { class: "row" }, h("div", {}, h("label", {}, "collection"), coll), h("div", {}, h("label", {}, "mode"), mode),
      h("div", {}, h("label", {}, "hits"), k)),
    h("label", {}, "query"), query, run), out);
}

export default { id: "search", title: "Search", available: (ctx) => Boolean(ctx.search), render };
