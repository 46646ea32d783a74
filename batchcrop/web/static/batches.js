// The index page: open and recent batches at a glance. The list is fetched again every
// LIST_REFRESH_SECONDS; each unfinished batch on it is also polled on its own with its ETag,
// at the pace its Retry-After asks for, so a busy batch updates without reloading the list.
// The state filter and the search live in the URL (`/?state=failed&q=sku-1`): bookmarkable,
// and Back and Forward move between them. A filtered page of the API can be short, even empty,
// with a cursor (docs/adr/0019): "Search older batches" follows it.

import {
  STATES,
  TERMINAL_STATES,
  Unauthorized,
  ageOf,
  apiJson,
  byId,
  clearStale,
  failuresText,
  h,
  pollStatus,
  progressBar,
  setNotice,
  showStale,
  startPage,
  stateBadge,
  timeElement,
} from "./common.js";

const LIST_PAGE_SIZE = 25;
const LIST_REFRESH_SECONDS = 30;

const pollers = new Map(); // batch id ⇒ stop function
let nextCursor = null;
let refreshTimer = null;
let filters = filtersFromUrl();

function filtersFromUrl() {
  const query = new URLSearchParams(window.location.search);
  return { state: query.get("state") || "", q: query.get("q") || "" };
}

function urlOf({ state, q }) {
  const query = new URLSearchParams();
  if (state) query.set("state", state);
  if (q) query.set("q", q);
  const text = query.toString();
  return text ? `/?${text}` : "/";
}

function filtered() {
  return Boolean(filters.state || filters.q);
}

function outputText(status) {
  const formats = (status.formats || ["jpeg"]).map((f) => f.toUpperCase()).join(", ");
  return `${status.ratios.join(", ")} · ${formats}`;
}

function row(status) {
  const link = h("a", { href: `/batches/${status.id}` }, h("code", {}, status.id.slice(0, 8)));
  return h(
    "tr",
    { "data-batch-id": status.id, "data-state": status.state },
    h(
      "th",
      { scope: "row" },
      link,
      h("span", { class: "visually-hidden" }, ` (batch ${status.id})`),
      h("br"),
      h("small", {}, "created ", timeElement(status.created_at)),
    ),
    // The label is the submitter's text: a text node (h), never markup.
    h("td", { class: "label" }, status.label ?? "—"),
    h("td", { class: "total" }, String(status.total)),
    h("td", { class: "output" }, outputText(status)),
    h(
      "td",
      {},
      stateBadge(status.state),
      status.cancel_requested ? h("span", { class: "flag" }, " cancel requested") : null,
    ),
    h("td", {}, progressBar(status)),
    h("td", { class: "failures" }, failuresText(status.failures)),
    h("td", {}, status.oldest_updated_at ? ageOf(status.oldest_updated_at) : "—"),
    h("td", {}, timeElement(status.deadline_at)),
  );
}

// Puts the row of `status` in place: an unchanged row is left alone and a changed one keeps
// the keyboard focus, so a refresh never yanks a person's place on the page.
function showRow(status, { prepend = false } = {}) {
  const existing = document.querySelector(`tr[data-batch-id="${status.id}"]`);
  // The minute is part of it so ages and "deadline in" texts stay current.
  const fingerprint = `${Math.floor(Date.now() / 60000)} ${JSON.stringify(status)}`;
  if (existing?.dataset.fingerprint !== fingerprint) {
    const fresh = row(status);
    fresh.dataset.fingerprint = fingerprint;
    const body = byId("batches").tBodies[0];
    if (existing) {
      const hadFocus = existing.contains(document.activeElement);
      existing.replaceWith(fresh);
      if (hadFocus) fresh.querySelector("a").focus();
    } else if (prepend) body.prepend(fresh);
    else body.append(fresh);
  }
  if (TERMINAL_STATES.has(status.state)) {
    pollers.get(status.id)?.();
    pollers.delete(status.id);
  } else if (!pollers.has(status.id)) {
    pollers.set(status.id, pollStatus(status.id, showRow, { onError: onPollError }));
  }
}

function onPollError(error) {
  if (error instanceof Unauthorized) {
    run();
    return;
  }
  showStale(`Live updates paused: ${error.message || "the API did not answer"}`);
}

let listGeneration = 0; // bumped by each new filter: answers for an older one are dropped

async function loadPage(cursor, { refresh = false } = {}) {
  const generation = listGeneration;
  const query = new URLSearchParams({ limit: String(LIST_PAGE_SIZE) });
  if (cursor) query.set("cursor", cursor);
  if (filters.state) query.set("state", filters.state);
  if (filters.q) query.set("q", filters.q);
  const page = await apiJson(`/v1/batches?${query}`);
  if (generation !== listGeneration) return page;
  // On a refresh, batches new since the last one go on top, newest first.
  const ordered = refresh ? [...page.batches].reverse() : page.batches;
  for (const status of ordered) showRow(status, { prepend: refresh });
  if (!refresh || nextCursor === null) nextCursor = page.next_cursor;
  showListEnd();
  return page;
}

function showListEnd() {
  const shown = byId("batches").tBodies[0].rows.length;
  const more = byId("more");
  more.hidden = !nextCursor;
  more.textContent = filtered() ? "Search older batches" : "Show older batches";
  const empty = byId("empty");
  empty.hidden = shown > 0;
  if (!filtered()) empty.textContent = "No batches yet.";
  else if (nextCursor) empty.textContent = "No match among the newest batches; search older ones.";
  else empty.textContent = "No batch matches.";
}

// Forgets the list on screen (and stops its polling) before another filter is shown.
function clearList() {
  listGeneration += 1;
  for (const stop of pollers.values()) stop();
  pollers.clear();
  byId("batches").tBodies[0].replaceChildren();
  nextCursor = null;
}

function showFilters() {
  const select = byId("filter-state");
  if (select.options.length === 1) {
    select.append(...STATES.map((state) => h("option", { value: state }, state.replace("_", " "))));
  }
  select.value = filters.state;
  byId("filter-q").value = filters.q;
  document.title = filtered() ? "Batches (filtered) · batchcrop" : "Batches · batchcrop";
}

async function applyFilters(fresh, { push }) {
  filters = fresh;
  if (push) window.history.pushState(null, "", urlOf(filters));
  showFilters();
  clearList();
  try {
    await loadPage(null);
    clearStale();
  } catch (error) {
    if (error instanceof Unauthorized) run();
    else setNotice(`Could not load: ${error.message}`);
  }
}

// The worker registry (GET /v1/workers): who is alive, who is no longer seen, what each holds.
function workerRow(worker) {
  const seen = worker.seen_seconds_ago === null ? "never registered" : `${worker.seen_seconds_ago} s ago`;
  const where = worker.host === null ? "—" : `${worker.host} (pid ${worker.pid})`;
  const batches = worker.batch_ids === null ? "all batches" : `batches ${worker.batch_ids.join(", ")}`;
  const slots = worker.concurrency === null ? "—" : `${worker.concurrency} slots, ${batches}`;
  return h(
    "tr",
    { "data-worker-id": worker.id, "data-status": worker.status },
    h("th", { scope: "row" }, h("code", {}, worker.id)),
    h("td", {}, h("span", { class: `badge worker-${worker.status}` }, worker.status)),
    h("td", {}, where),
    h("td", {}, seen),
    h("td", {}, slots),
    h("td", {}, String(worker.leases_held)),
    h("td", {}, worker.oldest_lease_at ? ageOf(worker.oldest_lease_at) : "—"),
  );
}

async function loadWorkers() {
  const { workers } = await apiJson("/v1/workers");
  byId("workers").tBodies[0].replaceChildren(...workers.map(workerRow));
  byId("no-workers").hidden = workers.length > 0;
}

let loaded = false;

async function load() {
  clearTimeout(refreshTimer);
  // Only on the first load: a refresh must not overwrite what someone is typing.
  if (!loaded) showFilters();
  const page = await loadPage(null, { refresh: loaded });
  await loadWorkers();
  loaded = true;
  byId("refreshed").replaceChildren("Updated ", timeElement(new Date().toISOString()), ".");
  refreshTimer = setTimeout(refresh, LIST_REFRESH_SECONDS * 1000);
  return page;
}

// The periodic refresh keeps the list on screen when the API does not answer: it says the data
// may be stale, and the next refresh that works takes that notice away.
async function refresh() {
  try {
    await load();
    clearStale();
  } catch (error) {
    if (error instanceof Unauthorized) {
      run();
      return;
    }
    showStale(`The list may be out of date: ${error.message || "the API did not answer"}`);
    refreshTimer = setTimeout(refresh, LIST_REFRESH_SECONDS * 1000);
  }
}

const run = startPage(load);
byId("more").addEventListener("click", async () => {
  try {
    await loadPage(nextCursor);
  } catch (error) {
    setNotice(`Could not load more: ${error.message}`);
  }
});
byId("filters").addEventListener("submit", (event) => {
  event.preventDefault();
  const fresh = { state: byId("filter-state").value, q: byId("filter-q").value.trim() };
  applyFilters(fresh, { push: true });
});
byId("filter-clear").addEventListener("click", () =>
  applyFilters({ state: "", q: "" }, { push: true }),
);
window.addEventListener("popstate", () => applyFilters(filtersFromUrl(), { push: false }));
run();
