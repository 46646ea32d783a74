// A small accessibility audit run in the page by tests/web/test_pages.py; returns a list of
// problems (empty when the page passes). Contrast per WCAG 2.x: relative luminance of sRGB
// colours, ratio (L1 + 0.05) / (L2 + 0.05), against the first non-transparent background among
// the element and its ancestors; 4.5:1 for text, 3:1 for large text, disabled controls exempt.
() => {
  const problems = [];
  const rgb = (text) => (text.match(/[\d.]+/g) || []).map(Number);
  const channel = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const luminance = ([r, g, b]) => 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const name = (el) => (el.getAttribute("aria-label") || el.textContent || el.alt || "").trim();
  const visible = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== "hidden";
  for (const img of document.querySelectorAll("img")) {
    if (!img.getAttribute("alt")) problems.push(`img without alt: ${img.outerHTML.slice(0, 80)}`);
  }
  for (const input of document.querySelectorAll("input, select, textarea")) {
    if (!input.labels || input.labels.length === 0) problems.push(`unlabelled ${input.id}`);
  }
  for (const control of document.querySelectorAll("button, a[href]")) {
    if (visible(control) && !name(control)) problems.push(`unnamed ${control.outerHTML.slice(0, 80)}`);
  }
  if (!document.documentElement.lang) problems.push("no lang on html");
  if (document.querySelectorAll("h1").length !== 1) problems.push("not exactly one h1");
  let level = 1;
  for (const h of document.querySelectorAll("h1, h2, h3, h4")) {
    const next = Number(h.tagName[1]);
    if (next > level + 1) problems.push(`heading jumps to ${h.tagName}: ${name(h)}`);
    level = next;
  }
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const el = walker.currentNode.parentElement;
    if (!walker.currentNode.textContent.trim() || !visible(el)) continue;
    if (el.closest("svg")) continue;
    const style = getComputedStyle(el);
    const [a, b] = [luminance(rgb(style.color)), luminance(background(el))];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const large = parseFloat(style.fontSize) >= 24 || (parseFloat(style.fontSize) >= 18.66 && Number(style.fontWeight) >= 700);
    const disabled = el.closest("button:disabled");  // WCAG exempts inactive controls
    if (!disabled && ratio < (large ? 3 : 4.5)) problems.push(`contrast ${ratio.toFixed(2)}: ${name(el).slice(0, 40)}`);
  }
  return problems;
}
