// Enhancements of the pages: everything here is optional, search and reading work without it.
// - copy buttons for citations; - arrow keys turn pages (mirrored for right-to-left books);
// - the page image becomes a deep-zoom view over the IIIF image service when OpenSeadragon is installed.
"use strict";

function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
}

function setUpCopyButtons() {
  for (const button of document.querySelectorAll("button.copy[data-copy]")) {
    const source = document.getElementById(button.dataset.copy);
    if (!source) continue;
    button.hidden = false;
    button.setAttribute("aria-label", "Copy " + (button.previousElementSibling?.previousElementSibling?.textContent || "text"));
    button.addEventListener("click", () => {
      copyText(source.textContent.trim()).then(
        () => flash(button, "Copied"),
        () => flash(button, "Select and copy"),
      );
    });
  }
}

function flash(button, text) {
  const before = "Copy";
  button.textContent = text;
  button.classList.add("done");
  setTimeout(() => {
    button.textContent = before;
    button.classList.remove("done");
  }, 2000);
}

function setUpPageKeys() {
  const reading = document.querySelector("article.reading");
  if (!reading) return;
  const rtl = reading.dataset.direction === "rtl";
  document.addEventListener("keydown", (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    const target = event.target;
    if (target.closest && (target.closest("input, textarea, select, [contenteditable], #zoom"))) return;
    let rel = null;
    if (event.key === "ArrowRight") rel = rtl ? "prev" : "next";
    if (event.key === "ArrowLeft") rel = rtl ? "next" : "prev";
    const link = rel && document.querySelector(`nav.pager a[rel=${rel}]`);
    if (link) {
      event.preventDefault();
      link.click();
    }
  });
}

function setUpZoom() {
  const zoom = document.getElementById("zoom");
  if (!zoom || !zoom.dataset.viewer || !window.OpenSeadragon) return;
  const width = Number(zoom.dataset.width);
  const height = Number(zoom.dataset.height);
  const plain = zoom.querySelector(".plain");
  const outlines = Array.from(zoom.querySelectorAll("a.outline"));
  const stage = document.createElement("div");
  stage.className = "deep";
  stage.style.aspectRatio = `${width} / ${height}`;
  zoom.appendChild(stage);
  const viewer = window.OpenSeadragon({
    element: stage,
    prefixUrl: zoom.dataset.viewer + "images/",
    tileSources: zoom.dataset.iiif,
    showNavigator: false,
    gestureSettingsMouse: { clickToZoom: false },
    visibilityRatio: 0.8,
    crossOriginPolicy: false,
  });
  document.documentElement.dataset.viewer = "loading";
  let tiles = 0;
  viewer.addHandler("tile-loaded", () => {
    tiles += 1;
    document.documentElement.dataset.tiles = String(tiles);
  });
  viewer.addHandler("open", () => {
    // Outlines keep their links; OpenSeadragon places them in image coordinates (y is scaled by width).
    for (const a of outlines) {
      a.removeAttribute("style");
      const r = new window.OpenSeadragon.Rect(
        Number(a.dataset.x), Number(a.dataset.y) * height / width,
        Number(a.dataset.w), Number(a.dataset.h) * height / width,
      );
      viewer.addOverlay({ element: a, location: r });
      // The viewer treats presses on its canvas as drags: follow the link on a click (Enter works as usual).
      new window.OpenSeadragon.MouseTracker({ element: a, clickHandler: () => { window.location.href = a.href; } });
    }
    plain.hidden = true;
    document.documentElement.dataset.viewer = "ready";
  });
  viewer.addHandler("open-failed", () => {
    stage.remove();
    document.documentElement.dataset.viewer = "failed";
  });
}

// Empty filters stay out of the URL, so a shared search link reads as what was asked.
function setUpCleanSearch() {
  for (const form of document.querySelectorAll("form.search")) {
    form.addEventListener("submit", () => {
      for (const field of form.querySelectorAll("input, select")) if (field.name && field.value === "") field.disabled = true;
      setTimeout(() => form.querySelectorAll("[disabled]").forEach((f) => { f.disabled = false; }), 0);
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  setUpCleanSearch();
  setUpCopyButtons();
  setUpPageKeys();
  setUpZoom();
});
