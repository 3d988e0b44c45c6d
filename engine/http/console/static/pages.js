// The console's pages, in menu order. A page is a module exporting { id, title, available(ctx), render(root, ctx) };
// render may return a function that stops what it started (timers). Adding a page: one file, one line here.
import overview from "./pages/overview.js";
import playground from "./pages/playground.js";
import search from "./pages/search.js";

export const PAGES = [overview, playground, search];
