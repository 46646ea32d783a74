// The contact sheet: one card per item, its source thumbnail with the crop box of every ratio
// drawn over it (an SVG whose viewBox is the oriented source size, so `crop_box` in source
// pixels is used as is and scales with the thumbnail), beside the derivatives themselves: one
// picture per ratio (its first format), captioned with every format's size. A derivative is a
// button: clicking it enlarges it in a dialog (Esc or Close closes it); hovering or focusing it
// highlights its crop box on the source. A padded derivative's box is drawn with the frame
// its padding makes around it (dashed, reaching past the source), and a trimmed item's
// trimmed box in white, so the sheet shows what each output holds (docs/design.md §6, fit).
//
// Until its picture arrives, every image is a neutral box of the size it will have (the source's
// aspect ratio from the item's preview record, a derivative's from its width and height), so the
// sheet does not jump as pictures come in; a picture that cannot be had says why in its place,
// with a Retry button when the server was only busy (503). `data-image` on each figure is
// `loading`, `shown` or `failed`.

import {
  byId,
  h,
  itemLabel,
  loadImage,
  RECROPPABLE_STATES,
  stateBadge,
  svg,
} from "./common.js";

// The stored preview's size (docs/design.md §5, previews): the server answers it as stored.
export const THUMBNAIL_MAX_SIDE_PX = 640;
// The largest a source is shown (style.css: .frame img.thumb), and the box of one whose size
// is not known yet (4:3).
const THUMB_BOX_REM = 15;
const UNKNOWN_ASPECT = 4 / 3;
const PX_PER_REM = 16;
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

// Loads `path` into `img` (inside `figure`), leaving the placeholder in place until the picture
// is decoded; returns the elements that say why when it is not (`what` names the picture on its
// card, "Source" or "16:9 derivative"; `label` the item). `onLoad(headers)` runs when the answer
// arrives, `onShown()` once the picture is decoded.
function loadInto(figure, img, path, what, label, { onLoad = () => {}, onShown = () => {} } = {}) {
  const problem = h("p", { class: "image-problem", hidden: true });
  const retry = h(
    "button",
    {
      type: "button",
      class: "secondary retry",
      hidden: true,
      "aria-label": `Retry ${what.toLowerCase()} of ${label}`,
    },
    "Retry",
  );
  function failed(text, busy) {
    figure.dataset.image = "failed";
    img.hidden = true;
    img.removeAttribute("src");
    problem.textContent = text;
    problem.hidden = false;
    retry.hidden = !busy;
  }
  function attempt() {
    figure.dataset.image = "loading";
    problem.hidden = true;
    retry.hidden = true;
    img.hidden = true;
    loadImage(path)
      .then(({ url, headers }) => {
        onLoad(headers);
        img.onload = () => {
          onShown();
          img.hidden = false;
          figure.dataset.image = "shown";
        };
        img.onerror = () => failed(`${what} not shown: the picture could not be decoded.`, false);
        img.src = url;
      })
      .catch((error) => {
        const busy = error.status === 503;
        failed(
          busy
            ? `${what} not shown yet: the server is busy.`
            : `${what} not shown: ${error.message || "unreadable"}`,
          busy,
        );
      });
  }
  retry.addEventListener("click", attempt);
  attempt();
  return [problem, retry];
}

// The thumbnail's box before it arrives, in rem: fitted into THUMB_BOX_REM, never wider than
// the source itself (a thumbnail is never enlarged).
function thumbBox(preview) {
  if (!preview) return [THUMB_BOX_REM, THUMB_BOX_REM / UNKNOWN_ASPECT];
  const { source_width: width, source_height: height } = preview;
  const scale = Math.min(THUMB_BOX_REM / width, THUMB_BOX_REM / height, 1 / PX_PER_REM);
  return [width * scale, height * scale];
}

// The frame a padded derivative fills, in source pixels: its crop box widened by its padding
// (output pixels, scaled back by the picture's own scale in the output).
export function frameBox(derivative) {
  const [left, top, right, bottom] = derivative.crop_box;
  const [padLeft, padTop, padRight, padBottom] = derivative.padding || [0, 0, 0, 0];
  const shownWidth = derivative.width - padLeft - padRight;
  const shownHeight = derivative.height - padTop - padBottom;
  const scaleX = (right - left) / Math.max(1, shownWidth);
  const scaleY = (bottom - top) / Math.max(1, shownHeight);
  return [
    left - padLeft * scaleX,
    top - padTop * scaleY,
    right + padRight * scaleX,
    bottom + padBottom * scaleY,
  ];
}

function padRect(derivative, index) {
  const [left, top, right, bottom] = frameBox(derivative);
  return svg(
    "rect",
    {
      class: `${boxClass(index)} padded-frame`,
      "data-ratio": derivative.ratio,
      "data-fit": "pad",
      x: left,
      y: top,
      width: right - left,
      height: bottom - top,
    },
    svg("title", {}, `${derivative.ratio} padded frame: the whole picture, padded to the ratio`),
  );
}

function trimRect(box) {
  const [left, top, right, bottom] = box;
  return svg(
    "rect",
    { class: "trim-box", x: left, y: top, width: right - left, height: bottom - top },
    svg("title", {}, `trimmed to ${left},${top} to ${right},${bottom}`),
  );
}

function sourceFigure(batchId, item, ratios) {
  const label = itemLabel(item);
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
  // Sizes through CSSOM, not a style attribute: the page's CSP allows no inline styles.
  const [boxWidth, boxHeight] = thumbBox(item.preview);
  frame.style.width = `${boxWidth}rem`;
  frame.style.height = `${boxHeight}rem`;
  const figure = h("figure", { class: "source" }, frame);
  const path = `/v1/batches/${batchId}/items/${item.id}/source-thumbnail?max_side=${THUMBNAIL_MAX_SIDE_PX}`;
  function onShown() {
    // From here the picture gives the frame its size.
    frame.style.width = "";
    frame.style.height = "";
  }
  function onLoad(headers) {
    const width = Number(headers.get("X-Source-Width"));
    const height = Number(headers.get("X-Source-Height"));
    overlay.setAttribute("viewBox", `0 0 ${width} ${height}`);
    overlay.dataset.sourceWidth = width;
    overlay.dataset.sourceHeight = height;
    // The formats of a ratio share its crop box: one box per ratio (a retry draws them anew).
    overlay.replaceChildren();
    const trimmed = item.derivatives.find((d) => d.trim_box);
    if (trimmed) overlay.append(trimRect(trimmed.trim_box));
    for (const [derivative] of byRatio(item.derivatives)) {
      const [left, top, right, bottom] = derivative.crop_box;
      const index = ratios.indexOf(derivative.ratio);
      if (derivative.fit === "pad") overlay.append(padRect(derivative, index < 0 ? 0 : index));
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
  }
  const notShown = loadInto(figure, img, path, "Source", label, { onLoad, onShown });
  figure.append(
    ...notShown,
    h(
      "figcaption",
      {},
      h("span", { class: "ref", title: label }, label),
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
  return figure;
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
  const severalWidths = new Set(formats.map((d) => d.requested_width)).size > 1;
  const label = itemLabel(item);
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
  const picture = h("div", { class: "picture" }, opener);
  picture.style.aspectRatio = `${derivative.width} / ${derivative.height}`;
  const figure = h(
    "figure",
    { class: "derivative-figure", "data-ratio": derivative.ratio, "data-key": derivative.key },
    picture,
    h(
      "figcaption",
      {},
      h("span", { class: `key-swatch ${boxClass(Math.max(0, ratios.indexOf(derivative.ratio)))}` }),
      `${derivative.ratio} · ${derivative.width}×${derivative.height}${derivative.fit === "pad" ? " · padded" : ""}`,
      h(
        "ul",
        { class: "formats", "aria-label": `${derivative.ratio} formats` },
        formats.map((d) =>
          h(
            "li",
            {
              "data-format": d.format || "jpeg",
              "data-bytes": d.bytes,
              "data-width": d.width,
            },
            // With several widths (a srcset), each entry says which one it is.
            `${FORMAT_LABELS[d.format || "jpeg"] || d.format}${severalWidths ? ` ${d.width}×${d.height}` : ""} ${sizeText(d.bytes)}`,
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
  figure.append(
    ...loadInto(
      figure,
      img,
      `${path}?format=${encodeURIComponent(format)}${derivative.requested_width ? `&width=${derivative.requested_width}` : ""}`,
      `${derivative.ratio} derivative`,
      label,
      {
        onShown: () => {
          opener.disabled = false;
        },
      },
    ),
  );
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
