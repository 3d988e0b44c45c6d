// The console shell: asks for the API key when the server wants one, loads what every page needs
// (the model list, and which optional features the server has), and routes #/<page> to its module.
import { api } from "./api.js";
import { h, errorBox } from "./dom.js";
import { PAGES } from "./pages.js";

const view = document.getElementById("view");
const nav = document.getElementById("nav");
const dialog = document.getElementById("key-dialog");
let ctx = null;
let stop = null;

async function probe(path) {
  try { return await api.get(path); } catch (e) { if (e.status === 404) return null; throw e; }
}

async function loadContext() {
  const models = (await api.get("/v1/models")).models;   // 401 here means: ask for the key
  const search = await probe("/v1/search");             // mounted by `shoal serve --db` only
  return { api, models, search };
}

function askForKey(message) {
  view.replaceChildren(h("p", { class: "muted" }, "This server needs an API key."));
  nav.replaceChildren();
  const err = document.getElementById("key-error");
  err.hidden = !message;
  err.textContent = message || "";
  document.getElementById("key-input").value = "";
  if (!dialog.open) dialog.showModal();
}

document.getElementById("key-form").addEventListener("submit", () => {
  api.setKey(document.getElementById("key-input").value.trim());
  start();
});
document.getElementById("forget-key").addEventListener("click", () => { api.setKey(null); start(); });

function route() {
  if (!ctx) return;
  const id = (location.hash.replace(/^#\/?/, "") || PAGES[0].id).split("?")[0];
  const pages = PAGES.filter((p) => p.available(ctx));
  const page = pages.find((p) => p.id === id) || pages[0];
  nav.replaceChildren(...pages.map((p) => h("a", { href: `#/${p.id}`, class: p === page ? "active" : "" }, p.title)));
  if (stop) stop();
  const root = h("div", { id: `page-${page.id}` });
  view.replaceChildren(root);
  try { stop = page.render(root, ctx) || null; } catch (e) { root.append(errorBox(e)); }
}

async function start() {
  ctx = null;
  try {
    ctx = await loadContext();
  } catch (e) {
    if (e.status === 401) return askForKey(api.key() ? "That key was refused." : "");
    view.replaceChildren(errorBox(e));
    return;
  }
  if (dialog.open) dialog.close();
  document.getElementById("forget-key").hidden = !api.key();
  document.getElementById("server").textContent = location.host;
  route();
}

window.addEventListener("hashchange", route);
start();
