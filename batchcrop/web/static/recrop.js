// Re-crop one item with a focus box (docs/operator-page.md, re-crop): the operator draws a box
// on the source — dragging with a pointer, or moving and resizing the focusable box with the
// arrow keys (Shift+arrows resize) — sees where each of the batch's ratios would crop with it
// (GET …/windows?focus=, the engine's own placement), and applies it (POST …/recrop, or Enter
// on the box). Coordinates are upright source pixels: the overlay's viewBox is the source size.

import {
  apiFetch,
  apiJson,
  h,
  itemLabel,
  loadImage,
  RECROPPABLE_STATES,
  svg,
} from "./common.js";

export const RECROP_SOURCE_MAX_SIDE_PX = 640;
const PREVIEW_DELAY_MS = 150;
const KEY_STEP_SHARE = 0.02; // an arrow key moves or resizes the box by this share of the long side
const BOX_STYLES = 6; // as sheet.js and style.css

function clamp(value, low, high) {
  return Math.min(Math.max(value, low), high);
}

function boxText(box) {
  const [left, top, right, bottom] = box;
  return `${left},${top} to ${right},${bottom}`;
}

// The initial box: the item's own focus box, else the middle half of the picture.
function initialBox(item, width, height) {
  if (item.focus_box) {
    const [left, top, right, bottom] = item.focus_box;
    const box = [clamp(left, 0, width - 1), clamp(top, 0, height - 1)];
    return [...box, clamp(right, box[0] + 1, width), clamp(bottom, box[1] + 1, height)];
  }
  const [w, h4] = [Math.round(width / 4), Math.round(height / 4)];
  return [w, h4, Math.max(w + 1, width - w), Math.max(h4 + 1, height - h4)];
}

// The re-crop editor of `item`; `onApplied(document)` runs once a re-crop was accepted, with the
// item document the API answered (the item is then queued).
export function recropEditor(batchId, item, ratios, { onApplied }) {
  const label = itemLabel(item);
  const base = `/v1/batches/${batchId}/items/${item.id}`;
  const img = h("img", { alt: `Source image of ${label}, to draw a focus box on`, class: "recrop-image" });
  const windowsLayer = svg("g", { class: "windows" });
  const focusRect = svg("rect", {
    class: "focus-box",
    tabindex: 0,
    role: "application",
    "aria-roledescription": "focus box",
    "aria-describedby": "recrop-help",
  });
  const overlay = svg(
    "svg",
    { class: "boxes recrop-overlay", preserveAspectRatio: "none" },
    windowsLayer,
    focusRect,
  );
  const boxOutput = h("p", { id: "recrop-box", class: "recrop-box", "aria-live": "polite" });
  const windowsList = h("ul", { id: "recrop-windows", class: "recrop-windows", "aria-label": "Previewed windows" });
  const message = h("p", { id: "recrop-message", class: "recrop-message", role: "status" });
  const apply = h("button", { id: "recrop-apply", type: "button" }, "Apply re-crop");
  const canApply = RECROPPABLE_STATES.has(item.state);
  apply.disabled = !canApply;
  if (!canApply) {
    message.textContent = item.focus_box
      ? `Re-crop pending: the item is ${item.state.replace("_", " ")} with focus box ${boxText(item.focus_box)}.`
      : `The item is ${item.state.replace("_", " ")}: it can be re-cropped once it has succeeded or failed.`;
  }

  let size = null;
  let box = null;
  let previewTimer = null;
  let previewSeq = 0;

  function draw() {
    const [left, top, right, bottom] = box;
    focusRect.setAttribute("x", left);
    focusRect.setAttribute("y", top);
    focusRect.setAttribute("width", right - left);
    focusRect.setAttribute("height", bottom - top);
    focusRect.setAttribute(
      "aria-label",
      `Focus box ${boxText(box)}. Arrow keys move it, Shift with arrow keys resizes it, Enter applies the re-crop.`,
    );
    boxOutput.textContent = `Focus box: ${boxText(box)} (source pixels)`;
    focusRect.dataset.box = box.join(",");
  }

  function schedulePreview() {
    if (previewTimer !== null) clearTimeout(previewTimer);
    previewTimer = setTimeout(preview, PREVIEW_DELAY_MS);
  }

  async function preview() {
    previewTimer = null;
    previewSeq += 1;
    const seq = previewSeq;
    const focus = box.join(",");
    try {
      const answer = await apiJson(`${base}/windows?focus=${encodeURIComponent(focus)}`);
      if (seq !== previewSeq) return; // a newer box was drawn meanwhile
      const rects = [];
      const lines = [];
      if (answer.trim_box) {
        const [left, top, right, bottom] = answer.trim_box;
        rects.push(
          svg(
            "rect",
            { class: "trim-box", x: left, y: top, width: right - left, height: bottom - top },
            svg("title", {}, `trimmed to ${boxText(answer.trim_box)}`),
          ),
        );
      }
      for (const window of answer.windows) {
        const [left, top, right, bottom] = window.crop_box;
        const index = Math.max(0, ratios.indexOf(window.ratio));
        if (window.fit === "pad") {
          // The padded output's frame, reaching past the picture by its padding.
          const [fl, ft, fr, fb] = window.frame_box;
          rects.push(
            svg(
              "rect",
              {
                class: `box box-${index % BOX_STYLES} preview padded-frame`,
                "data-ratio": window.ratio,
                "data-fit": "pad",
                x: fl,
                y: ft,
                width: fr - fl,
                height: fb - ft,
              },
              svg("title", {}, `${window.ratio} padded frame: ${boxText(window.frame_box)}`),
            ),
          );
        }
        rects.push(
          svg(
            "rect",
            {
              class: `box box-${index % BOX_STYLES} preview`,
              "data-ratio": window.ratio,
              x: left,
              y: top,
              width: right - left,
              height: bottom - top,
            },
            svg("title", {}, `${window.ratio} window: ${boxText(window.crop_box)}`),
          ),
        );
        lines.push(
          h(
            "li",
            {
              "data-ratio": window.ratio,
              "data-crop-box": window.crop_box.join(","),
              "data-fit": window.fit,
            },
            h("span", { class: `key-swatch box box-${index % BOX_STYLES}` }),
            `${window.ratio}: ${boxText(window.crop_box)}${window.fit === "pad" ? " (padded)" : ""}`,
          ),
        );
      }
      windowsLayer.replaceChildren(...rects);
      windowsList.replaceChildren(...lines);
      windowsList.dataset.focus = focus;
      if (message.dataset.kind === "preview") {
        message.textContent = "";
        delete message.dataset.kind;
      }
    } catch (error) {
      if (seq !== previewSeq) return;
      windowsLayer.replaceChildren();
      windowsList.replaceChildren();
      message.textContent = `No preview: ${error.message}`;
      message.dataset.kind = "preview";
    }
  }

  async function applyRecrop() {
    if (apply.disabled || box === null) return;
    apply.disabled = true;
    message.textContent = "Applying…";
    try {
      const response = await apiFetch(`${base}/recrop`, { method: "POST", body: { focus_box: box } });
      const document = await response.json();
      message.textContent = `Re-crop pending: the item is ${document.state.replace("_", " ")} with focus box ${boxText(document.focus_box)}.`;
      onApplied(document);
    } catch (error) {
      message.textContent = `Not re-cropped: ${error.message}`;
      apply.disabled = !RECROPPABLE_STATES.has(item.state);
    }
  }

  // Pointer: press and drag anywhere on the source to draw a new box.
  let anchor = null;
  function toSource(event) {
    const rect = overlay.getBoundingClientRect();
    return [
      clamp(Math.round(((event.clientX - rect.left) / rect.width) * size[0]), 0, size[0]),
      clamp(Math.round(((event.clientY - rect.top) / rect.height) * size[1]), 0, size[1]),
    ];
  }
  // The box spanned by two points, at least one pixel wide and high, inside the picture.
  function spanning(a, b) {
    const left = Math.min(a[0], b[0], size[0] - 1);
    const top = Math.min(a[1], b[1], size[1] - 1);
    const right = clamp(Math.max(a[0], b[0]), left + 1, size[0]);
    const bottom = clamp(Math.max(a[1], b[1]), top + 1, size[1]);
    return [left, top, right, bottom];
  }
  overlay.addEventListener("pointerdown", (event) => {
    if (size === null) return;
    event.preventDefault();
    overlay.setPointerCapture(event.pointerId);
    anchor = toSource(event);
    box = spanning(anchor, anchor);
    draw();
  });
  overlay.addEventListener("pointermove", (event) => {
    if (anchor === null) return;
    box = spanning(anchor, toSource(event));
    draw();
  });
  overlay.addEventListener("pointerup", (event) => {
    if (anchor === null) return;
    box = spanning(anchor, toSource(event));
    anchor = null;
    draw();
    focusRect.focus();
    schedulePreview();
  });

  // Keyboard: the focused box moves with the arrow keys, resizes with Shift+arrows (its right
  // and bottom edges), and Enter applies.
  focusRect.addEventListener("keydown", (event) => {
    if (size === null) return;
    if (event.key === "Enter") {
      event.preventDefault();
      applyRecrop();
      return;
    }
    const moves = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] };
    const move = moves[event.key];
    if (!move) return;
    event.preventDefault();
    const step = Math.max(1, Math.round(Math.max(...size) * KEY_STEP_SHARE));
    let [left, top, right, bottom] = box;
    if (event.shiftKey) {
      right = clamp(right + move[0] * step, left + 1, size[0]);
      bottom = clamp(bottom + move[1] * step, top + 1, size[1]);
    } else {
      const dx = clamp(move[0] * step, -left, size[0] - right);
      const dy = clamp(move[1] * step, -top, size[1] - bottom);
      [left, top, right, bottom] = [left + dx, top + dy, right + dx, bottom + dy];
    }
    box = [left, top, right, bottom];
    draw();
    schedulePreview();
  });
  apply.addEventListener("click", applyRecrop);

  const frame = h("div", { class: "frame recrop-frame" }, img, overlay);
  loadImage(`${base}/source-thumbnail?max_side=${RECROP_SOURCE_MAX_SIDE_PX}`)
    .then(({ url, headers }) => {
      size = [Number(headers.get("X-Source-Width")), Number(headers.get("X-Source-Height"))];
      overlay.setAttribute("viewBox", `0 0 ${size[0]} ${size[1]}`);
      box = initialBox(item, size[0], size[1]);
      img.src = url;
      draw();
      schedulePreview();
    })
    .catch((error) => {
      frame.classList.add("missing");
      img.hidden = true;
      apply.disabled = true;
      message.textContent = `Source not shown, so no re-crop: ${error.message}`;
    });

  return h(
    "div",
    { class: "recrop" },
    frame,
    h("div", { class: "recrop-side" }, boxOutput, windowsList, h("p", {}, apply), message),
  );
}
