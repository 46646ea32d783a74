// One item: its document, its contact-sheet card, the re-crop editor, and its transition
// timeline (every page of `GET /v1/batches/{id}/events?item=`, up to EVENT_PAGES_MAX pages).
// While the item is unfinished (a re-crop pending) the page reloads it every PENDING_POLL_MS
// until it has ended, then shows its new derivatives and timeline.

import {
  apiJson,
  byId,
  h,
  itemLabel,
  releaseImages,
  setNotice,
  startPage,
  stateBadge,
  TERMINAL_STATES,
  timeElement,
} from "./common.js";
import { recropEditor } from "./recrop.js";
import { itemCard } from "./sheet.js";

const EVENTS_PAGE_SIZE = 500;
const EVENT_PAGES_MAX = 20;
const PENDING_POLL_MS = 1000;

const batchId = document.body.dataset.batchId;
const itemId = document.body.dataset.itemId;

function term(name, ...value) {
  return [h("dt", {}, name), h("dd", {}, ...value)];
}

function eventRow(event) {
  return h(
    "tr",
    { "data-event-id": event.id },
    h("td", {}, timeElement(event.at, { milliseconds: true })),
    h("td", {}, String(event.attempt)),
    h(
      "th",
      { scope: "row", class: "transition" },
      event.from_state ? stateBadge(event.from_state) : h("span", {}, "new"),
      h("span", { "aria-label": "to" }, " → "),
      stateBadge(event.to_state),
    ),
    h(
      "td",
      {},
      event.reason ? h("code", {}, event.reason) : "—",
      event.focus_box ? ` focus box ${event.focus_box.join(",")}` : null,
    ),
    h("td", { class: "message" }, event.message || "—"),
    h("td", {}, event.worker_id ? h("code", {}, event.worker_id) : "—"),
    h("td", {}, event.lease_token ? h("code", {}, event.lease_token) : "—"),
    h("td", {}, event.correlation_id ? h("code", {}, event.correlation_id) : "—"),
  );
}

// An item is created queued with its batch and logs no event for it (ADR 0023); items created
// before that have a creation event (from_state null) of their own, and get no second row.
function creationRow(createdAt) {
  return h(
    "tr",
    { class: "created" },
    h("td", {}, timeElement(createdAt, { milliseconds: true })),
    h("td", {}, "0"),
    h(
      "th",
      { scope: "row", class: "transition" },
      h("span", {}, "new"),
      h("span", { "aria-label": "to" }, " → "),
      stateBadge("queued"),
    ),
    ...Array.from({ length: 5 }, () => h("td", {}, "—")),
  );
}

async function allEvents() {
  const events = [];
  let cursor = null;
  for (let page = 0; page < EVENT_PAGES_MAX; page += 1) {
    const query = new URLSearchParams({ item: itemId, limit: String(EVENTS_PAGE_SIZE) });
    if (cursor) query.set("cursor", cursor);
    const answer = await apiJson(`/v1/batches/${batchId}/events?${query}`);
    events.push(...answer.events);
    cursor = answer.next_cursor;
    if (!cursor) return { events, complete: true };
  }
  return { events, complete: false };
}

let pendingTimer = null;

// Reload the item every PENDING_POLL_MS while it is unfinished; the whole page once it ends.
function followPending() {
  if (pendingTimer !== null) return;
  pendingTimer = setTimeout(async () => {
    pendingTimer = null;
    try {
      const item = await apiJson(`/v1/batches/${batchId}/items/${itemId}`);
      if (TERMINAL_STATES.has(item.state)) {
        await load();
        return;
      }
      byId("item-state").replaceChildren(stateBadge(item.state));
    } catch (error) {
      setNotice(`Could not follow the item: ${error.message}`);
    }
    followPending();
  }, PENDING_POLL_MS);
}

async function load() {
  const [status, item, timeline] = await Promise.all([
    apiJson(`/v1/batches/${batchId}`),
    apiJson(`/v1/batches/${batchId}/items/${itemId}`),
    allEvents(),
  ]);
  const label = itemLabel(item);
  document.title = `Item ${label} · batchcrop`;
  byId("summary").replaceChildren(
    ...term("Reference", label),
    ...term("Source", h("code", {}, item.source)),
    ...term("State", h("span", { id: "item-state" }, stateBadge(item.state))),
    ...term("Attempt", String(item.attempt)),
    ...term("Error category", item.error_category ? h("code", {}, item.error_category) : "none"),
    ...(item.error_message ? term("Error message", item.error_message) : []),
    ...term("Last change", timeElement(item.updated_at)),
  );
  releaseImages();
  byId("sheet").replaceChildren(itemCard(batchId, item, status.ratios));
  byId("recrop").replaceChildren(
    recropEditor(batchId, item, status.ratios, { onApplied: () => followPending() }),
  );
  if (!TERMINAL_STATES.has(item.state)) followPending();
  const logged = timeline.events.length > 0 && !timeline.events[0].from_state;
  const created = logged ? [] : [creationRow(status.created_at)];
  byId("timeline").tBodies[0].replaceChildren(...created, ...timeline.events.map(eventRow));
  if (!timeline.complete) {
    setNotice(`Showing the first ${timeline.events.length} transitions only.`);
  }
}

startPage(load)();
