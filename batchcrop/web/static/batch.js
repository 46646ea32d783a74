// One batch: status (polled with ETag and Retry-After), the operator actions, the failed and
// abandoned items, and the contact sheet paged with the items cursor.

import {
  REQUEUEABLE_STATES,
  TERMINAL_STATES,
  ageOf,
  apiFetch,
  apiJson,
  byId,
  deadlineText,
  h,
  pollStatus,
  progressBar,
  releaseImages,
  setNotice,
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
const sheet = { cursors: [null], index: 0, next: null };
let problemsCursor = null;

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
    ),
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
    ...term("Deadline", timeElement(status.deadline_at), " ", deadlineText(status)),
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
  byId("requeue").disabled = [...REQUEUEABLE_STATES].every((state) => c[state] === 0);
  byId("cancel").disabled = TERMINAL_STATES.has(status.state) || status.cancel_requested;
  // Items moved: refresh the lists that show them (not on every poll of an unchanged batch).
  if (previous && JSON.stringify(previous.counts) !== JSON.stringify(status.counts)) {
    refreshLists().catch(onError);
  }
}

// The completion callback's deliveries (docs/api.md, completion callbacks); `succeeded` means
// delivered. Redelivery is offered once the latest delivery has ended.
function showDeliveries(batch) {
  byId("callback").hidden = !batch.notify_url;
  if (!batch.notify_url) return;
  byId("notify-url").textContent = batch.notify_url;
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
  setNotice(`Live updates paused: ${error.message || "the API did not answer"}`);
}

function problemRow(item) {
  const label = item.ref || item.id;
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

function card(item) {
  const element = itemCard(batchId, item, status.ratios);
  element.dataset.fingerprint = cardFingerprint(item);
  return element;
}

// Shows the current page of the sheet. `update`: the same page again after items moved; only
// the cards whose item changed are rebuilt, so a person checking crops keeps their place.
async function loadSheet({ update = false } = {}) {
  const query = new URLSearchParams({ limit: String(sheetPageSize) });
  const cursor = sheet.cursors[sheet.index];
  if (cursor) query.set("cursor", cursor);
  const page = await apiJson(`/v1/batches/${batchId}/items?${query}`);
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
  sheet.next = page.next_cursor;
  const first = sheet.index * sheetPageSize + 1;
  const last = sheet.index * sheetPageSize + page.items.length;
  byId("sheet-page").textContent = page.items.length
    ? `Items ${first} to ${last} of ${status.total}`
    : "No items on this page";
  byId("sheet-prev").disabled = sheet.index === 0;
  byId("sheet-next").disabled = !sheet.next;
}

async function refreshLists() {
  await Promise.all([loadProblems(), loadSheet({ update: true })]);
}

async function turnPage(step) {
  if (step > 0 && sheet.next) {
    sheet.cursors[sheet.index + 1] = sheet.next;
    sheet.index += 1;
  } else if (step < 0 && sheet.index > 0) {
    sheet.index -= 1;
  } else {
    return;
  }
  await loadSheet();
  byId("sheet-heading").scrollIntoView();
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
      body: action === "requeue" ? payload : undefined,
    });
    const fresh = await response.json();
    const done = {
      requeue: `Requeued. The batch is now ${fresh.state.replace("_", " ")}.`,
      cancel: "Cancel requested. Unclaimed items are abandoned now, held ones shortly.",
      redeliver: "A new delivery of the latest notification is on its way.",
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
  await Promise.all([loadProblems(), loadSheet()]);
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
byId("redeliver").addEventListener("click", () =>
  act("Deliver this batch's latest completion callback again?", "redeliver"),
);
byId("problems-more").addEventListener("click", () =>
  loadProblems({ append: true }).catch(onError),
);
byId("sheet-prev").addEventListener("click", () => turnPage(-1).catch(onError));
byId("sheet-next").addEventListener("click", () => turnPage(1).catch(onError));
run();
