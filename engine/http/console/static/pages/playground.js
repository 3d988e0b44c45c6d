// Playground: try a model. Encode shows the similarity between the texts; score ranks documents for a query;
// extract (shown only when the server lists an extract-capable model) marks the entities it finds.
import { h, table, errorBox } from "../dom.js";

const DEFAULT = "sentence-transformers/all-MiniLM-L6-v2";
const lines = (text) => text.split("\n").map((s) => s.trim()).filter(Boolean);
const enc = encodeURIComponent;

function modelPicker(models, preferred) {
  const names = models.map((m) => m.name);
  const pick = names.includes(preferred) ? preferred : names[0];
  return h("select", {}, names.map((n) => h("option", { value: n, selected: n === pick }, n)));
}

function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return dot / (Math.sqrt(na * nb) || 1);
}

function shade(v) { return `rgba(31, 111, 235, ${Math.max(0, Math.min(1, v)) * 0.55})`; }

function encodeTab(ctx) {
  const models = ctx.models.filter((m) => m.tasks.includes("encode") && m.outputs.includes("dense"));
  const model = modelPicker(models, DEFAULT);
  const texts = h("textarea", { id: "encode-texts" },
    "A cat sits on the mat.\nA kitten is resting on a rug.\nThe stock market fell sharply today.");
  const out = h("div", { id: "encode-result" });
  const run = h("button", { id: "encode-run", onclick: go }, "Encode");
  async function go() {
    const items = lines(texts.value).map((text) => ({ text }));
    if (!items.length) return;
    run.disabled = true;
    out.replaceChildren(h("p", { class: "muted" }, "Encoding…"));
    try {
      const r = await ctx.api.post(`/v1/encode/${model.value}`, { items, params: { output_types: ["dense"] } });
      const vecs = r.items.map((it) => it.dense.values);
      const labels = items.map((_, i) => `#${i + 1}`);
      const rows = vecs.map((a, i) => [labels[i], ...vecs.map((b) => {
        const s = cosine(a, b);
        const td = h("span", { style: `background:${shade(s)};display:block;padding:2px` }, s.toFixed(3));
        return td;
      })]);
      out.replaceChildren(
        h("p", { class: "ok" }, `${vecs.length} vectors of ${vecs[0].length} dims`,
          r.timing && r.timing.total_ms ? ` in ${r.timing.total_ms.toFixed(0)} ms` : ""),
        h("h2", {}, "Cosine similarity"),
        h("table", { class: "sim" }, h("tbody", {},
          h("tr", {}, h("th", {}, ""), labels.map((l) => h("th", {}, l))),
          rows.map((r) => h("tr", {}, r.map((c, i) => h(i ? "td" : "th", {}, c)))))),
        h("ol", {}, items.map((it) => h("li", {}, it.text))));
    } catch (e) { out.replaceChildren(errorBox(e)); }
    run.disabled = false;
  }
  return h("div", {}, h("label", {}, "model"), model, h("label", {}, "texts, one per line"), texts, run, out);
}

function scoreTab(ctx) {
  const models = ctx.models.filter((m) => m.tasks.includes("score"));
  if (!models.length) return h("p", { class: "muted" }, "No model on this server can score (rerank).");
  const model = modelPicker(models, "cross-encoder/ms-marco-MiniLM-L-6-v2");
  model.id = "score-model";
  const query = h("input", { value: "How do I reset the pump?", id: "score-query" });
  const docs = h("textarea", { id: "score-docs" }, "Press and hold the reset button for five seconds.\nThe harbour opens at dawn.\nPumps restart after a power cut.");
  const out = h("div", { id: "score-result" });
  const run = h("button", { onclick: go, id: "score-run" }, "Score");
  async function go() {
    const texts = lines(docs.value);
    run.disabled = true;
    try {
      const r = await ctx.api.post(`/v1/score/${model.value}`,
        { query: { text: query.value }, items: texts.map((text, i) => ({ id: String(i), text })) });
      out.replaceChildren(table(["rank", "score", "document"],
        r.scores.map((s) => [String(s.rank + 1), s.score.toFixed(4), texts[Number(s.item_id)]]), [0, 1]));
    } catch (e) { out.replaceChildren(errorBox(e)); }
    run.disabled = false;
  }
  return h("div", {}, h("label", {}, "model"), model, h("label", {}, "query"), query,
    h("label", {}, "documents, one per line"), docs, run, out);
}

function marked(text, entities) {
  const parts = [];
  let at = 0;
  for (const e of [...entities].sort((a, b) => a.start - b.start)) {
    if (e.start < at) continue;
    parts.push(text.slice(at, e.start), h("mark", { title: `${e.label} ${e.score.toFixed(2)}` }, text.slice(e.start, e.end)));
    at = e.end;
  }
  parts.push(text.slice(at));
  return h("p", {}, parts);
}

function extractTab(ctx, models) {
  const model = modelPicker(models, "");
  model.id = "extract-model";
  const labels = h("input", { value: "person, organisation, date", id: "extract-labels" });
  const text = h("textarea", { id: "extract-text" }, "Ada Lovelace joined Acme Harbour Ltd on 3 March 2024.");
  const out = h("div", { id: "extract-result" });
  const run = h("button", { onclick: go, id: "extract-run" }, "Extract");
  async function go() {
    run.disabled = true;
    try {
      const r = await ctx.api.post(`/v1/extract/${model.value}`, {
        items: [{ text: text.value }], params: { labels: labels.value.split(",").map((s) => s.trim()).filter(Boolean) } });
      const ents = r.items[0].entities || [], classes = r.items[0].classifications || [];
      out.replaceChildren(marked(text.value, ents),
        ents.length ? table(["label", "text", "score"], ents.map((e) => [e.label, e.text, e.score.toFixed(3)]), [2]) : "",
        classes.length ? table(["class", "score"], classes.map((c) => [c.label, c.score.toFixed(3)]), [1]) : "");
    } catch (e) { out.replaceChildren(errorBox(e)); }
    run.disabled = false;
  }
  return h("div", {}, h("label", {}, "model"), model, h("label", {}, "labels, comma-separated"), labels,
    h("label", {}, "text"), text, run, out);
}

function render(root, ctx) {
  const extractors = ctx.models.filter((m) => m.tasks.includes("extract"));
  const tabs = [["encode", "Encode", () => encodeTab(ctx)], ["score", "Score / rerank", () => scoreTab(ctx)]];
  if (extractors.length) tabs.push(["extract", "Extract", () => extractTab(ctx, extractors)]);
  const panel = h("div", { class: "card" });
  const bar = h("div", { class: "tabs" });
  function show(id) {
    for (const b of bar.children) b.classList.toggle("active", b.dataset.tab === id);
    panel.replaceChildren(tabs.find((t) => t[0] === id)[2]());
  }
  for (const [id, title] of tabs) {
    const b = h("button", { onclick: () => show(id), id: `tab-${id}` }, title);
    b.dataset.tab = id;
    bar.append(b);
  }
  root.append(h("h1", {}, "Playground"), bar, panel);
  show("encode");
}

export default { id: "playground", title: "Playground", available: () => true, render };
