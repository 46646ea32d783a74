// The contact sheet: one card per item, its source thumbnail with the crop box of every ratio
// drawn over it (an SVG whose viewBox is the oriented source size, so `crop_box` in source
// pixels is used as is and scales with the thumbnail), beside the derivatives themselves: one
// picture per ratio (its first format), captioned with every format's size. A derivative is a
// button: clicking it enlarges it in a dialog (Esc or Close closes it); hovering or focusing it
// highlights its crop box on the source.

import { byId, h, loadImage, RECROPPABLE_STATES, stateBadge, svg } from "./common.js";

export const THUMBNAIL_MAX_SIDE_PX = 320;
// Box styles per ratio, by position in the batch's ratio list: colour and dash pattern both
// differ, so the boxes stay distinguishable without colour vision. Kept in step with style.css.
const BOX_STYLES = 6;

export function ratioPath(ratio) {
  return ratio.replace(":", "x");
}

const FORMAT_LABELS = { jpeg: "JPEG", webp: "WebP", avif: "AVIF" };

// Bytes as the caption shows them: 12.3 KiB.
export function sizeText(bytes) {
  return bytes < 1024 ? `${bytes} B` : `${(bytes / 1024).toFixed(1)} KiB`;
}

// The item's derivatives grouped by ratio (the API lists each ratio's formats together).
function byRatio(derivatives) {
  const groups = new Map();
  for (const derivative of derivatives) {
    if (!groups.has(derivative.ratio)) groups.set(derivative.ratio, []);
    groups.get(derivative.ratio).push(derivative);
  }
  return [...groups.values()];
}

function boxClass(index) {
  return `box box-${index % BOX_STYLES}`;
}

function sourceFigure(batchId, item, ratios) {
  const label = item.ref || item.id;
  const img = h("img", { alt: `Source image of ${label}`, class: "thumb" });
  const overlay = svg("svg", {
    class: "boxes",
    role: "img",
    preserveAspectRatio: "none",
    "aria-label": item.derivatives.length
      ? `Crop boxes for ${byRatio(item.derivatives).map((g) => g[0].ratio).join(", ")}`
      : "No crop boxes: no derivatives yet",
  });
  const frame = h("div", { class: "frame" }, img, overlay);
  const problem = h("p", { class: "image-problem", hidden: true });
  loadImage(`/v1/batches/${batchId}/items/${item.id}/source-thumbnail?max_side=${THUMBNAIL_MAX_SIDE_PX}`)
    .then(({ url, headers }) => {
      const width = Number(headers.get("X-Source-Width"));
      const height = Number(headers.get("X-Source-Height"));
      overlay.setAttribute("viewBox", `0 0 ${width} ${height}`);
      overlay.dataset.sourceWidth = width;
      overlay.dataset.sourceHeight = height;
      // The formats of a ratio share its crop box: one box per ratio.
      for (const [derivative] of byRatio(item.derivatives)) {
        const [left, top, right, bottom] = derivative.crop_box;
        const index = ratios.indexOf(derivative.ratio);
        overlay.append(
          svg(
            "rect",
            {
              class: boxClass(index < 0 ? 0 : index),
              "data-ratio": derivative.ratio,
              x: left,
              y: top,
              width: right - left,
              height: bottom - top,
            },
            svg("title", {}, `${derivative.ratio} crop: ${left},${top} to ${right},${bottom}`),
          ),
        );
      }
      img.src = url;
    })
    .catch((error) => {
      frame.classList.add("missing");
      img.hidden = true;
      problem.textContent = `Source not shown: ${error.message || "unreadable"}`;
      problem.hidden = false;
    });
  return h(
    "figure",
    { class: "source" },
    frame,
    problem,
    h(
      "figcaption",
      {},
      h("span", { class: "ref" }, label),
      " ",
      stateBadge(item.state),
      item.error_category ? h("span", { class: "category" }, ` ${item.error_category}`) : null,
      " ",
      h(
        "a",
        { href: `/batches/${batchId}/items/${item.id}`, "aria-label": `Timeline of ${label}` },
        "Timeline",
      ),
      RECROPPABLE_STATES.has(item.state) ? " · " : null,
      RECROPPABLE_STATES.has(item.state)
        ? h(
            "a",
            {
              href: `/batches/${batchId}/items/${item.id}#recrop-heading`,
              "aria-label": `Re-crop ${label}`,
            },
            "Re-crop",
          )
        : null,
    ),
  );
}

// The one dialog that shows an enlarged derivative (created on first use).
function enlargedDialog() {
  let dialog = byId("enlarged");
  if (dialog) return dialog;
  const close = h("button", { type: "button", class: "secondary" }, "Close");
  dialog = h(
    "dialog",
    { id: "enlarged", class: "enlarged", "aria-labelledby": "enlarged-caption" },
    h("img", { id: "enlarged-image", alt: "" }),
    h("p", { id: "enlarged-caption" }),
    close,
  );
  close.addEventListener("click", () => dialog.close());
  document.body.append(dialog);
  return dialog;
}

function enlarge(img, caption, opener) {
  const dialog = enlargedDialog();
  const large = byId("enlarged-image");
  large.src = img.src;
  large.alt = img.alt;
  byId("enlarged-caption").textContent = caption;
  // The dialog's Esc and Close give the focus back to the derivative that opened it.
  dialog.addEventListener("close", () => opener.focus(), { once: true });
  dialog.showModal();
}

// Highlight (or not) the crop box of `ratio` on the source of the card holding `figure`.
function highlight(figure, ratio, on) {
  const card = figure.closest("li.card");
  if (!card) return;
  for (const rect of card.querySelectorAll("svg.boxes rect[data-ratio]")) {
    if (rect.dataset.ratio === ratio) rect.classList.toggle("highlight", on);
  }
}

function derivativeFigure(batchId, item, formats, ratios) {
  const [derivative] = formats;
  const format = derivative.format || "jpeg";
  const label = item.ref || item.id;
  const description = `${derivative.ratio} derivative of ${label}, ${derivative.width} by ${derivative.height} pixels, ${FORMAT_LABELS[format] || format}`;
  const img = h("img", {
    alt: description,
    width: derivative.width,
    height: derivative.height,
    class: "derivative",
  });
  const opener = h(
    "button",
    {
      type: "button",
      class: "enlarge",
      "aria-label": `Enlarge the ${derivative.ratio} derivative of ${label}`,
      disabled: true,
    },
    img,
  );
  opener.addEventListener("click", () => enlarge(img, description, opener));
  const figure = h(
    "figure",
    { class: "derivative-figure", "data-ratio": derivative.ratio, "data-key": derivative.key },
    opener,
    h(
      "figcaption",
      {},
      h("span", { class: `key-swatch ${boxClass(Math.max(0, ratios.indexOf(derivative.ratio)))}` }),
      `${derivative.ratio} · ${derivative.width}×${derivative.height}`,
      h(
        "ul",
        { class: "formats", "aria-label": `${derivative.ratio} formats` },
        formats.map((d) =>
          h(
            "li",
            { "data-format": d.format || "jpeg", "data-bytes": d.bytes },
            `${FORMAT_LABELS[d.format || "jpeg"] || d.format} ${sizeText(d.bytes)}`,
          ),
        ),
      ),
    ),
  );
  const path = `/v1/batches/${batchId}/items/${item.id}/derivatives/${ratioPath(derivative.ratio)}`;
  for (const [events, on] of [
    [["mouseenter", "focusin"], true],
    [["mouseleave", "focusout"], false],
  ]) {
    for (const name of events) {
      figure.addEventListener(name, () => highlight(figure, derivative.ratio, on));
    }
  }
  loadImage(`${path}?format=${encodeURIComponent(format)}`)
    .then(({ url }) => {
      img.src = url;
      opener.disabled = false;
    })
    .catch((error) => {
      figure.classList.add("missing");
      img.hidden = true;
      figure.append(h("p", { class: "image-problem" }, `Not shown: ${error.message}`));
    });
  return figure;
}

// One <li> of the sheet for `item`; `ratios` is the batch's ratio list (box styles follow it).
export function itemCard(batchId, item, ratios) {
  const groups = byRatio(item.derivatives).sort(
    (a, b) => ratios.indexOf(a[0].ratio) - ratios.indexOf(b[0].ratio),
  );
  return h(
    "li",
    { class: "card", "data-item-id": item.id, "data-state": item.state },
    sourceFigure(batchId, item, ratios),
    h(
      "div",
      { class: "derivatives" },
      groups.map((formats) => derivativeFigure(batchId, item, formats, ratios)),
    ),
  );
}
