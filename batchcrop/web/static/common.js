// Shared by every page: the API client with the bearer token, the token form, safe DOM
// building, status polling (ETag + Retry-After), image loading through object URLs, and the
// progress bar. No data is ever written into the DOM as HTML: only as text or attributes.

const TOKEN_KEY = "batchcrop.apiToken";
const IMAGE_FETCHES_AT_ONCE = 4; // the server decodes thumbnails 2 at a time; keep a small queue
const RETRY_AFTER_DEFAULT_SECONDS = 5;
const LOADING = "Loading…";
const TIME_TICK_SECONDS = 1; // relative times ("3 min ago") are redrawn this often, locally
const JUST_NOW_SECONDS = 5;

// The state vocabulary is the server's (GET /v1/meta), filled in before a page's first load.
// Every page needs it: `startPage` loads it (once) before the page's own data.
export const STATES = [];
export const TERMINAL_STATES = new Set();
export const REQUEUEABLE_STATES = new Set();
export const RECROPPABLE_STATES = new Set();

// What an item is called on the page: its ref, else its source's file name (folder
// submissions have no ref, and a UUID names nothing a person recognises), else its id.
export function itemLabel(item) {
  if (item.ref) return item.ref;
  const name = (item.source || "").split("/").filter(Boolean).pop();
  return name || item.id;
}

export class Unauthorized extends Error {}

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || `the API answered ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

// The token lives in sessionStorage: this tab, and the tabs opened from it (Chromium copies a
// tab's sessionStorage into a tab it opens with an opener, see `openLinksWithTheToken`), until
// they close. Only when the operator ticks "Remember on this browser" is it also kept in
// localStorage, for every tab of this browser until "Forget token" clears both.
export function token() {
  return sessionStorage.getItem(TOKEN_KEY) ?? localStorage.getItem(TOKEN_KEY);
}

function keepToken(value, { remember }) {
  sessionStorage.setItem(TOKEN_KEY, value);
  if (remember) localStorage.setItem(TOKEN_KEY, value);
  else localStorage.removeItem(TOKEN_KEY);
}

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  localStorage.removeItem(TOKEN_KEY);
}

// A Ctrl-, Cmd-, Shift- or middle-click on a link opens a tab without an opener, into which
// Chromium copies nothing of this tab's sessionStorage: that tab would ask for the token again.
// So while the token is kept for this tab only, the page opens such tabs itself with
// window.open (which keeps the opener, so the copy is made); the new tab then drops its opener.
function openLinksWithTheToken() {
  if (window.opener) window.opener = null;
  const open = (event) => {
    const link = event.target instanceof Element ? event.target.closest("a[href]") : null;
    if (!link || link.origin !== window.location.origin || link.target) return;
    const newTab =
      event.button === 1 ||
      (event.button === 0 && (event.ctrlKey || event.metaKey || event.shiftKey));
    if (!newTab || localStorage.getItem(TOKEN_KEY) || !sessionStorage.getItem(TOKEN_KEY)) return;
    event.preventDefault();
    window.open(link.href, "_blank");
  };
  document.addEventListener("click", open);
  document.addEventListener("auxclick", open);
}

function authHeaders(extra = {}) {
  const value = token();
  return value ? { ...extra, Authorization: `Bearer ${value}` } : { ...extra };
}

async function problemOf(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}

// fetch() against this server's API with the token; 401 ⇒ Unauthorized, other errors ⇒ ApiError.
// 304 is returned as is (the caller sent If-None-Match). `cache: "no-store"` keeps the browser
// from answering a conditional request from its own cache with a 200.
export async function apiFetch(path, { method = "GET", headers = {}, body, signal } = {}) {
  const init = { method, headers: authHeaders(headers), cache: "no-store", signal };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, init);
  if (response.status === 401) throw new Unauthorized();
  if (!response.ok && response.status !== 304) {
    throw new ApiError(response.status, await problemOf(response));
  }
  return response;
}

export async function apiJson(path, options) {
  return (await apiFetch(path, options)).json();
}

// Fetches images with the token (an <img src> cannot send it) and shows them from object URLs,
// a few at a time so a contact sheet of a hundred does not queue a hundred decodes on the server.
const imageQueue = [];
let imagesInFlight = 0;
const objectUrls = new Set();

function pumpImages() {
  while (imagesInFlight < IMAGE_FETCHES_AT_ONCE && imageQueue.length) {
    const { path, resolve, reject } = imageQueue.shift();
    imagesInFlight += 1;
    fetch(path, { headers: authHeaders() })
      .then(async (response) => {
        if (response.status === 401) throw new Unauthorized();
        if (!response.ok) throw new ApiError(response.status, await problemOf(response));
        const url = URL.createObjectURL(await response.blob());
        objectUrls.add(url);
        resolve({ url, headers: response.headers });
      })
      .catch(reject)
      .finally(() => {
        imagesInFlight -= 1;
        pumpImages();
      });
  }
}

export function loadImage(path) {
  return new Promise((resolve, reject) => {
    imageQueue.push({ path, resolve, reject });
    pumpImages();
  });
}

// Frees every image loaded so far (call before replacing a page of images).
export function releaseImages() {
  imageQueue.length = 0;
  for (const url of objectUrls) URL.revokeObjectURL(url);
  objectUrls.clear();
}

// h("a", {href: "/x", class: "y"}, "text", child): attributes set as attributes, children
// appended as text nodes or elements. `null`/`false` children are skipped.
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  setAttributes(element, attributes);
  appendChildren(element, children);
  return element;
}

const SVG_NS = "http://www.w3.org/2000/svg";

export function svg(tag, attributes = {}, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  setAttributes(element, attributes);
  appendChildren(element, children);
  return element;
}

function setAttributes(element, attributes) {
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    element.setAttribute(name, value === true ? "" : String(value));
  }
}

function appendChildren(element, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function byId(id) {
  return document.getElementById(id);
}

export function setNotice(text) {
  const notice = byId("notice");
  notice.textContent = text;
  delete notice.dataset.stale;
}

// A notice that the data on screen may be out of date (a poll or refresh failed). It is the
// only kind `clearStale` removes: the next successful poll or refresh takes it away by itself,
// and leaves any other message alone.
export function showStale(text) {
  setNotice(text);
  byId("notice").dataset.stale = "true";
}

export function clearStale() {
  const notice = byId("notice");
  if (notice.dataset.stale) setNotice("");
}

// Times: ISO 8601 UTC from the API, shown in UTC (one time zone for everyone on a call), with
// how long ago (or how far ahead) beside it. The relative part is redrawn every
// TIME_TICK_SECONDS from the clock alone, never refetched; the absolute time stays in the
// `title` and the machine-readable one in `datetime`.
// `milliseconds`: keep them (a timeline's transitions often share a second).
export function timeElement(iso, { milliseconds = false } = {}) {
  if (!iso) return h("span", {}, "—");
  const shown = milliseconds ? iso : iso.replace(/\.\d+Z$/, "Z");
  const absolute = shown.replace("T", " ").replace("Z", " UTC");
  return h(
    "time",
    { datetime: iso, title: absolute },
    h("span", { class: "absolute" }, absolute),
    " ",
    h("span", { class: "relative" }, `(${relativeTime(iso)})`),
  );
}

export function relativeTime(iso, now = Date.now()) {
  const seconds = (now - Date.parse(iso)) / 1000;
  if (Math.abs(seconds) < JUST_NOW_SECONDS) return "just now";
  return seconds > 0 ? `${duration(seconds)} ago` : `in ${duration(-seconds)}`;
}

function tickTimes() {
  const now = Date.now();
  for (const element of document.querySelectorAll("time[datetime] > .relative")) {
    const text = `(${relativeTime(element.parentElement.getAttribute("datetime"), now)})`;
    if (element.textContent !== text) element.textContent = text;
  }
}

setInterval(tickTimes, TIME_TICK_SECONDS * 1000);

export function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) return `${s} s`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min`;
  if (s < 48 * 3600) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} days`;
}

export function ageOf(iso) {
  return iso ? duration((Date.now() - Date.parse(iso)) / 1000) : "—";
}

export function stateBadge(state) {
  return h("span", { class: `badge state-${state}` }, state.replace("_", " "));
}

export const SEGMENTS = [
  { name: "succeeded", label: "succeeded", count: (c) => c.succeeded },
  { name: "failed", label: "failed", count: (c) => c.failed },
  { name: "abandoned", label: "abandoned", count: (c) => c.abandoned },
  { name: "in_progress", label: "in progress", count: (c) => c.in_progress },
  { name: "waiting", label: "queued or retryable", count: (c) => c.queued + c.retryable },
];

// A bar split by state, widths proportional to the counts, and the same numbers as text.
export function progressBar(status) {
  const total = status.total || 1;
  const parts = SEGMENTS.map((s) => ({ ...s, n: s.count(status.counts) }));
  const summary = parts
    .filter((p) => p.n)
    .map((p) => `${p.n} ${p.label}`)
    .join(", ");
  const label = `${status.total} items: ${summary || "none"}`;
  const bar = h(
    "div",
    { class: "bar", role: "img", "aria-label": label },
    parts
      .filter((p) => p.n)
      .map((p) =>
        h("span", {
          class: `seg seg-${p.name}`,
          "data-state": p.name,
          "data-count": p.n,
          title: `${p.n} ${p.label}`,
        }),
      ),
  );
  // Widths through CSSOM, not a style attribute: the page's CSP allows no inline styles.
  for (const span of bar.children) {
    span.style.width = `${(100 * Number(span.dataset.count)) / total}%`;
  }
  const done = [...TERMINAL_STATES].reduce((sum, state) => sum + status.counts[state], 0);
  return h(
    "div",
    { class: "progress" },
    bar,
    h("span", { class: "progress-text" }, `${done} of ${status.total} finished`),
  );
}

export function failuresText(failures) {
  const entries = Object.entries(failures).sort(([a], [b]) => a.localeCompare(b));
  return entries.length ? entries.map(([category, n]) => `${category}: ${n}`).join(", ") : "none";
}

// Polls one batch by the API's rules: If-None-Match with the last ETag, waits Retry-After,
// stops when the batch is terminal (no Retry-After) or past `poll_until`. `onChange` gets each
// new status document. Returns a function that stops the polling.
export function pollStatus(batchId, onChange, { etag = null, onError = () => {} } = {}) {
  let timer = null;
  let stopped = false;
  let lastEtag = etag;
  async function tick() {
    timer = null;
    let wait = RETRY_AFTER_DEFAULT_SECONDS;
    try {
      const headers = lastEtag ? { "If-None-Match": lastEtag } : {};
      const response = await apiFetch(`/v1/batches/${batchId}`, { headers });
      if (stopped) return;
      let status = null;
      clearStale();
      if (response.status === 200) {
        lastEtag = response.headers.get("ETag");
        status = await response.json();
        if (stopped) return; // stopped while the body was read: the caller moved on
        onChange(status);
      }
      const retryAfter = response.headers.get("Retry-After");
      if (retryAfter === null) return; // terminal: only a requeue reopens it
      if (status && Date.now() > Date.parse(status.poll_until)) return;
      wait = Math.max(1, Number(retryAfter) || RETRY_AFTER_DEFAULT_SECONDS);
    } catch (error) {
      onError(error);
      if (error instanceof Unauthorized) return;
    }
    if (!stopped) timer = setTimeout(tick, wait * 1000);
  }
  timer = setTimeout(tick, 0);
  return () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
  };
}

// On a phone a table shows each row as a stack of cells (style.css), each led by its column's
// heading: every body cell of a `table.data` carries that heading as `data-label`, set again
// whenever a page writes rows.
function labelCells(table) {
  const headings = [...(table.tHead?.rows[0]?.cells || [])].map((cell) => cell.textContent.trim());
  for (const body of table.tBodies) {
    for (const row of body.rows) {
      [...row.cells].forEach((cell, index) => {
        if (headings[index] && cell.dataset.label !== headings[index]) {
          cell.dataset.label = headings[index];
        }
      });
    }
  }
}

function labelTables() {
  for (const table of document.querySelectorAll("table.data")) {
    labelCells(table);
    new MutationObserver(() => labelCells(table)).observe(table, { childList: true, subtree: true });
  }
}

async function loadMeta() {
  if (TERMINAL_STATES.size) return;
  const meta = await apiJson("/v1/meta");
  STATES.push(...meta.states);
  for (const state of meta.terminal_states) TERMINAL_STATES.add(state);
  for (const state of meta.requeueable_states) REQUEUEABLE_STATES.add(state);
  for (const state of meta.recroppable_states) RECROPPABLE_STATES.add(state);
}

// Runs `load` and handles the token: on 401 the data is hidden and the token form shown; a
// token entered there is kept (see `token`) and `load` runs again.
export function startPage(load) {
  const form = byId("token-form");
  const input = byId("token-input");
  const remember = byId("token-remember");
  const forget = byId("token-forget");
  const content = byId("content");
  labelTables();
  openLinksWithTheToken();

  async function run() {
    forget.hidden = !token();
    try {
      await loadMeta();
      await load();
      if (byId("notice").textContent === LOADING) setNotice("");
      form.hidden = true;
      content.hidden = false;
    } catch (error) {
      content.hidden = true;
      if (error instanceof Unauthorized) {
        form.hidden = false;
        remember.checked = localStorage.getItem(TOKEN_KEY) !== null;
        setNotice(
          token()
            ? "The API token was not accepted. Enter the current one."
            : "Enter the API token to see batches.",
        );
        input.focus();
      } else {
        setNotice(`Could not load: ${error.message}`);
      }
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    keepToken(input.value.trim(), { remember: remember.checked });
    input.value = "";
    setNotice(LOADING);
    run();
  });
  forget.addEventListener("click", () => {
    forgetToken();
    window.location.reload();
  });
  setNotice(LOADING);
  return run;
}
