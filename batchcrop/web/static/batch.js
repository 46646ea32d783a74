// One batch: status (polled with ETag and Retry-After), the operator actions, the failed and
// abandoned items, and the contact sheet paged with the items cursor. The sheet's view (state
// and ratio filters, the page's cursor or the ref it starts at, its number) lives in the URL,
// so a view can be bookmarked; each change pushes a history entry, and Back and Forward
// (popstate) show those views again. Only one page of items is ever fetched at a time.

import {
  REQUEUEABLE_STATES,
  STATES,
  TERMINAL_STATES,
  ApiError,
  ageOf,
  apiFetch,
  apiJson,
  byId,
  h,
  itemLabel,
  pollStatus,
  progressBar,
  releaseImages,
  setNotice,
  showStale,
  startPage,
  stateBadge,
  timeElement,
  Unauthorized,
} from "./common.js";
import { itemCard } from "./sheet.js";

const SHEET_PAGE_SIZE_DEFAULT = 24;
const SHEET_PAGE_SIZE_MAX = 100;
const PROBLEMS_PAGE_SIZE = 50;
const SECONDS_PER_HOUR = 3600;

const batchId = document.body.dataset.batchId;
const sheetPageSize = pageSizeFromUrl();

let status = null;
let stopPolling = () => {};
let view = viewFromUrl();
let nextCursor = null;
let problemsCursor = null;

// The sheet's view from the URL (and the pages walked before it, from the history entry):
// `page` is the page's number, 0 when unknown (a page reached by a jump to a ref, or after it).
function viewFromUrl() {
  const query = new URLSearchParams(window.location.search);
  const cursor = query.get("cursor") || "";
  const ref = query.get("ref") || "";
  const page = Number(query.get("page"));
  return {
    state: query.get("state") || "",
    ratio: query.get("ratio") || "",
    cursor,
    ref,
    page: Number.isInteger(page) && page >= 1 ? page : cursor || ref ? 0 : 1,
    previous: window.history.state?.previous || [],
  };
}

function urlOf(shown) {
  const query = new URLSearchParams();
  for (const name of ["state", "ratio", "ref", "cursor"]) {
    if (shown[name]) query.set(name, shown[name]);
  }
  if (shown.page > 1) query.set("page", String(shown.page));
  if (sheetPageSize !== SHEET_PAGE_SIZE_DEFAULT) query.set("per_page", String(sheetPageSize));
  const text = query.toString();
  return text ? `?${text}` : window.location.pathname;
}

function pageSizeFromUrl() {
  const asked = Number(new URLSearchParams(window.location.search).get("per_page"));
  if (!Number.isInteger(asked) || asked < 1) return SHEET_PAGE_SIZE_DEFAULT;
  return Math.min(asked, SHEET_PAGE_SIZE_MAX);
}

function term(name, ...value) {
  return [h("dt", {}, name), h("dd", {}, ...value)];
}

function showStatus(fresh) {
  const previous = status;
  status = fresh;
  document.title = `Batch ${status.id.slice(0, 8)} (${status.state.replace("_", " ")}) · batchcrop`;
  byId("progress").replaceChildren(progressBar(status));
  const c = status.counts;
  byId("summary").replaceChildren(
    ...(status.label ? term("Label", status.label) : []),
    ...term(
      "State",
      stateBadge(status.state),
      status.cancel_requested ? h("span", { class: "flag" }, " cancel requested") : null,
      status.paused ? h("span", { class: "flag" }, " paused") : null,
    ),
    ...term("Priority", String(status.priority)),
    ...term("Items", String(status.total)),
    ...term(
      "Counts",
      `${c.succeeded} succeeded, ${c.failed} failed, ${c.abandoned} abandoned, ` +
        `${c.in_progress} in progress, ${c.queued} queued, ${c.retryable} retryable`,
    ),
    ...term("Ratios", status.ratios.join(", ")),
    ...term(
      "Output",
      `longest side ${status.max_side} px, quality ${status.quality}, ` +
        (status.formats || ["jpeg"]).map((f) => f.toUpperCase()).join(", "),
    ),
    ...(status.store ? term("Store", h("code", {}, status.store)) : []),
    ...term("Created", timeElement(status.created_at)),
    ...term("Last change", timeElement(status.updated_at)),
    ...term("Deadline", timeElement(status.deadline_at)),
    ...term(
      "Oldest unfinished item",
      status.oldest_updated_at ? `unchanged for ${ageOf(status.oldest_updated_at)}` : "none",
    ),
    ...(status.terminal_reason ? term("Outcome", status.terminal_reason) : []),
  );
  const failures = Object.entries(status.failures).sort(([a], [b]) => a.localeCompare(b));
  byId("failure-categories").hidden = failures.length === 0;
  byId("no-failures").hidden = failures.length > 0;
  byId("failure-categories").tBodies[0].replaceChildren(
    ...failures.map(([category, n]) =>
      h("tr", {}, h("th", { scope: "row" }, h("code", {}, category)), h("td", {}, String(n))),
    ),
  );
  showDeliveries(status);
  fillSheetFilters(status);
  byId("requeue").disabled = [...REQUEUEABLE_STATES].every((state) => c[state] === 0);
  byId("cancel").disabled = TERMINAL_STATES.has(status.state) || status.cancel_requested;
  byId("pause").textContent = status.paused ? "Resume batch" : "Pause batch";
  if (!previous || previous.priority !== status.priority) {
    byId("priority").value = String(status.priority);
  }
  // Items moved: refresh the lists that show them (not on every poll of an unchanged batch).
  if (previous && JSON.stringify(previous.counts) !== JSON.stringify(status.counts)) {
    refreshLists().catch(onError);
  }
}

// The completion callback's deliveries (docs/api.md, completion callbacks); `succeeded` means
// delivered. Redelivery is offered once the latest delivery has ended.
function showDeliveries(batch) {
  byId("callback").hidden = !batch.callback_url;
  if (!batch.callback_url) return;
  byId("callback-url").textContent = batch.callback_url;
  const deliveries = batch.deliveries || [];
  byId("deliveries").tBodies[0].replaceChildren(
    ...deliveries.map((d) =>
      h(
        "tr",
        {},
        h("td", {}, h("code", { title: d.notification_id }, d.notification_id.slice(0, 8))),
        h("td", {}, stateBadge(d.state)),
        h("td", {}, String(d.attempts)),
        h("td", {}, d.reason ? h("code", {}, d.reason) : "–"),
        h("td", {}, timeElement(d.updated_at)),
      ),
    ),
  );
  const latest = deliveries[deliveries.length - 1];
  byId("redeliver").disabled = !latest || !TERMINAL_STATES.has(latest.state);
}

function follow(fresh) {
  stopPolling();
  showStatus(fresh);
  if (!TERMINAL_STATES.has(fresh.state)) {
    stopPolling = pollStatus(batchId, showStatus, { onError });
  }
}

function onError(error) {
  if (error instanceof Unauthorized) {
    run();
    return;
  }
  showStale(`Live updates paused: ${error.message || "the API did not answer"}`);
}

function problemRow(item) {
  const label = itemLabel(item);
  const requeue = h(
    "button",
    { type: "button", class: "secondary", "aria-label": `Requeue ${label}` },
    "Requeue",
  );
  requeue.addEventListener("click", () =>
    act(`Requeue item ${label}?`, "requeue", { item_ids: [item.id] }),
  );
  return h(
    "tr",
    { "data-item-id": item.id },
    h("th", { scope: "row" }, h("a", { href: `/batches/${batchId}/items/${item.id}` }, label)),
    h("td", {}, stateBadge(item.state)),
    h("td", {}, h("code", {}, item.error_category || "—")),
    h("td", { class: "message" }, item.error_message || "—"),
    h("td", {}, String(item.attempt)),
    h("td", {}, timeElement(item.updated_at)),
    h("td", {}, requeue),
  );
}

async function loadProblems({ append = false } = {}) {
  const query = new URLSearchParams([
    ...[...REQUEUEABLE_STATES].map((state) => ["state", state]),
    ["limit", String(PROBLEMS_PAGE_SIZE)],
  ]);
  if (append && problemsCursor) query.set("cursor", problemsCursor);
  const page = await apiJson(`/v1/batches/${batchId}/items?${query}`);
  const body = byId("problem-items").tBodies[0];
  if (!append) body.replaceChildren();
  body.append(...page.items.map(problemRow));
  byId("problem-items").hidden = body.rows.length === 0;
  problemsCursor = page.next_cursor;
  byId("problems-more").hidden = !problemsCursor;
}

function cardFingerprint(item) {
  return JSON.stringify([
    item.state,
    item.attempt,
    item.error_category,
    item.error_message,
    item.derivatives,
  ]);
}

// The item as the sheet shows it: with the ratio filter, only that ratio's derivatives (and
// crop box); the card's own code is unchanged.
function card(item) {
  const shown = view.ratio
    ? { ...item, derivatives: item.derivatives.filter((d) => d.ratio === view.ratio) }
    : item;
  const element = itemCard(batchId, shown, status.ratios);
  element.dataset.fingerprint = cardFingerprint(item);
  return element;
}

// The filter fields' options, once the batch's ratios are known; their values follow the
// view shown (set by `showSheetFilters`, not on each poll: a choice not yet applied stays).
function fillSheetFilters(batch) {
  const states = byId("sheet-state");
  if (states.options.length > 1) return;
  states.append(...STATES.map((s) => h("option", { value: s }, s.replace("_", " "))));
  byId("sheet-ratio").append(...batch.ratios.map((r) => h("option", { value: r }, r)));
  showSheetFilters();
}

function showSheetFilters() {
  byId("sheet-state").value = view.state;
  byId("sheet-ratio").value = status?.ratios.includes(view.ratio) ? view.ratio : "";
}

function itemsPath(shown) {
  const query = new URLSearchParams({ limit: String(sheetPageSize) });
  if (shown.state) query.set("state", shown.state);
  if (shown.ref) query.set("from_ref", shown.ref);
  else if (shown.cursor) query.set("cursor", shown.cursor);
  return `/v1/batches/${batchId}/items?${query}`;
}

function pageText(shown, count) {
  if (!count) return shown.page === 1 ? "No items in this view" : "No items on this page";
  const total = shown.state ? status.counts[shown.state] : status.total;
  if (shown.page === 0) return `${count} items${shown.ref ? ` from ${shown.ref}` : ""} of ${total}`;
  const first = (shown.page - 1) * sheetPageSize + 1;
  return `Items ${first} to ${first + count - 1} of ${total}`;
}

// Shows the sheet in view `shown`. `update`: the same page again after items moved; only the
// cards whose item changed are rebuilt, so a person checking crops keeps their place.
// `push`: a new view, recorded as a history entry once its page has loaded (a jump to a ref
// no item has leaves the view, and the history, as they were).
async function loadSheet(shown = view, { update = false, push = false } = {}) {
  const page = await apiJson(itemsPath(shown));
  view = shown;
  if (push) window.history.pushState({ previous: view.previous }, "", urlOf(view));
  const list = byId("sheet");
  if (update) {
    for (const item of page.items) {
      const existing = list.querySelector(`li[data-item-id="${item.id}"]`);
      if (existing && existing.dataset.fingerprint !== cardFingerprint(item)) {
        existing.replaceWith(card(item));
      }
    }
  } else {
    releaseImages();
    list.replaceChildren(...page.items.map(card));
  }
  nextCursor = page.next_cursor;
  byId("sheet-page").textContent = pageText(view, page.items.length);
  byId("sheet-first").disabled = view.page === 1;
  byId("sheet-prev").disabled = view.previous.length === 0;
  byId("sheet-next").disabled = !nextCursor;
  showSheetFilters();
}

async function refreshLists() {
  await Promise.all([loadProblems(), loadSheet(view, { update: true })]);
}

async function showView(shown) {
  await loadSheet(shown, { push: true });
  byId("sheet-heading").scrollIntoView();
}

function here() {
  return { cursor: view.cursor, ref: view.ref, page: view.page };
}

async function turnPage(step) {
  if (step > 0 && nextCursor) {
    const page = view.page ? view.page + 1 : 0;
    const previous = [...view.previous, here()];
    await showView({ ...view, cursor: nextCursor, ref: "", page, previous });
  } else if (step < 0 && view.previous.length) {
    const back = view.previous[view.previous.length - 1];
    await showView({ ...view, ...back, previous: view.previous.slice(0, -1) });
  }
}

// A new filter or jump starts a fresh walk: page 1, or the page starting at the ref.
function freshView(changes) {
  return { ...view, cursor: "", ref: "", page: 1, previous: [], ...changes };
}

async function jumpToRef(ref) {
  const result = byId("sheet-result");
  try {
    await showView(freshView({ ref, page: 0 }));
    result.textContent = "";
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 404) throw error;
    result.textContent = `No item with ref ${ref}${view.state ? ` in state ${view.state}` : ""}.`;
  }
}

function deadlineSeconds() {
  const hours = Number(byId("deadline-hours").value);
  return byId("deadline-hours").value && hours > 0 ? hours * SECONDS_PER_HOUR : undefined;
}

// An operator action, after a confirmation; sent with the token like every API call.
async function act(question, action, body = {}) {
  const result = byId("action-result");
  if (!window.confirm(question)) {
    result.textContent = "Nothing was changed.";
    return;
  }
  const deadline = action === "requeue" ? deadlineSeconds() : undefined;
  const payload = deadline === undefined ? body : { ...body, deadline_seconds: deadline };
  try {
    const response = await apiFetch(`/v1/batches/${batchId}/${action}`, {
      method: "POST",
      body: action === "requeue" || action === "priority" ? payload : undefined,
    });
    const fresh = await response.json();
    const done = {
      requeue: `Requeued. The batch is now ${fresh.state.replace("_", " ")}.`,
      cancel: "Cancel requested. Unclaimed items are abandoned now, held ones shortly.",
      pause: "Paused. Nothing more is claimed; items under way finish.",
      resume: "Resumed. Its items are claimed again.",
      priority: `Priority set to ${fresh.priority}.`,
      redeliver: "A new delivery of the latest callback is on its way.",
    };
    result.textContent = done[action];
    // follow() shows the new counts, which refreshes the item lists.
    follow(fresh);
  } catch (error) {
    if (error instanceof Unauthorized) {
      run();
      return;
    }
    result.textContent = `Not done: ${error.message}`;
  }
}

async function load() {
  const response = await apiFetch(`/v1/batches/${batchId}`);
  const fresh = await response.json();
  status = null;
  follow(fresh);
  await Promise.all([loadProblems(), loadSheet(view)]);
}

const run = startPage(load);
byId("requeue").addEventListener("click", () => {
  const states = [...REQUEUEABLE_STATES];
  const n = states.reduce((sum, state) => sum + status.counts[state], 0);
  act(`Requeue the ${n} ${states.join(" and ")} items of this batch?`, "requeue", { states });
});
byId("cancel").addEventListener("click", () =>
  act("Cancel this batch? Items not yet finished will be abandoned.", "cancel"),
);
byId("pause").addEventListener("click", () =>
  status.paused
    ? act("Resume this batch?", "resume")
    : act("Pause this batch? Items under way finish; its deadline runs on.", "pause"),
);
byId("set-priority").addEventListener("click", () => {
  const priority = Number(byId("priority").value);
  act(`Give this batch priority ${priority}?`, "priority", { priority });
});
byId("redeliver").addEventListener("click", () =>
  act("Deliver this batch's latest completion callback again?", "redeliver"),
);
byId("problems-more").addEventListener("click", () =>
  loadProblems({ append: true }).catch(onError),
);
byId("sheet-prev").addEventListener("click", () => turnPage(-1).catch(onError));
byId("sheet-next").addEventListener("click", () => turnPage(1).catch(onError));
byId("sheet-first").addEventListener("click", () => showView(freshView({})).catch(onError));
byId("sheet-filters").addEventListener("submit", (event) => {
  event.preventDefault();
  const changes = { state: byId("sheet-state").value, ratio: byId("sheet-ratio").value };
  byId("sheet-result").textContent = "";
  showView(freshView(changes)).catch(onError);
});
byId("sheet-jump").addEventListener("submit", (event) => {
  event.preventDefault();
  const ref = byId("sheet-ref").value.trim();
  if (ref) jumpToRef(ref).catch(onError);
});
window.addEventListener("popstate", () => {
  byId("sheet-result").textContent = "";
  loadSheet(viewFromUrl()).catch(onError);
});
run();
