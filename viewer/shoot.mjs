// Open a Mirador page in headless Chromium, wait until the first canvas shows its image, save a screenshot and print
// what was seen as one JSON object on stdout.
//
//   node viewer/shoot.mjs <page-url> <screenshot.png> [timeout-ms]
//
// Only loopback may be contacted: every other request is aborted and listed under "blocked". Exit status 0 when the
// page was observed (whether or not it rendered: the caller judges the JSON), 2 on bad arguments, 1 on a crash.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [pageUrl, outPng, timeoutArg] = process.argv.slice(2);
if (!pageUrl || !outPng) {
  console.error("usage: node shoot.mjs <page-url> <screenshot.png> [timeout-ms]");
  process.exit(2);
}
const timeoutMs = Number(timeoutArg || 30000);
const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);
// An image request of the IIIF Image API: .../iiif/3/{id}/{region}/{size}/{rotation}/{quality}.{format}
const IMAGE_RE = /\/iiif\/3\/([^/]+)\/([^/]+)\/([^/]+)\/([^/]+)\/([^/.]+)\.(jpg|png|webp)(\?|$)/;

const seen = { blocked: [], images: [], errors: [], statuses: {} };
const profile = mkdtempSync(join(tmpdir(), "mirador-profile-"));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1100, height: 760 },
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  await browser.route("**/*", (route) => {
    const url = new URL(route.request().url());
    if (url.protocol === "data:" || url.protocol === "blob:" || LOOPBACK.has(url.hostname)) return route.continue();
    seen.blocked.push(url.href);
    return route.abort("blockedbyclient");
  });
  const page = browser.pages()[0] || (await browser.newPage());
  page.on("pageerror", (err) => seen.errors.push(String(err)));
  page.on("response", (resp) => {
    const url = resp.url();
    const path = new URL(url).pathname;
    seen.statuses[path] = resp.status();
    const m = IMAGE_RE.exec(url);
    if (m) {
      seen.images.push({
        url,
        id: decodeURIComponent(m[1]),
        region: m[2],
        size: m[3],
        status: resp.status(),
        type: resp.headers()["content-type"] || "",
      });
    }
  });
  await page.goto(pageUrl, { waitUntil: "load", timeout: timeoutMs });

  // The window's title bar shows the manifest's label once the manifest has loaded.
  const titleBar = page.locator(".mirador-window-top-bar h2, .mirador-window-top-bar [class*=title]").first();
  await titleBar.waitFor({ state: "visible", timeout: timeoutMs });
  await page.waitForFunction(
    () => {
      const el = document.querySelector(".mirador-window-top-bar h2, .mirador-window-top-bar [class*=title]");
      return el && el.textContent.trim().length > 0;
    },
    null,
    { timeout: timeoutMs },
  );
  seen.windowTitle = (await titleBar.textContent()).trim();

  // OpenSeadragon draws the page into a canvas (2D or WebGL). Its pixels may be tainted for script reads, so judge
  // what a user would see: screenshots of the element, decoded in the page from a same-origin data URL.
  const osd = page.locator(".openseadragon-canvas").first();
  await osd.waitFor({ state: "visible", timeout: timeoutMs });
  const deadline = Date.now() + timeoutMs;
  let stats = null;
  let stableSince = 0;
  let lastRequests = -1;
  while (Date.now() < deadline) {
    const shot = await osd.screenshot({ timeout: timeoutMs });
    stats = await page.evaluate(async (b64) => {
      const img = new Image();
      img.src = "data:image/png;base64," + b64;
      await img.decode();
      const c = document.createElement("canvas");
      c.width = img.width;
      c.height = img.height;
      const g = c.getContext("2d");
      g.drawImage(img, 0, 0);
      const px = g.getImageData(0, 0, c.width, c.height).data;
      // The viewer's empty background is one flat colour, the commonest one: count pixels that differ from it.
      const counts = new Map();
      for (let i = 0; i < px.length; i += 4) {
        const key = (px[i] >> 4) * 256 + (px[i + 1] >> 4) * 16 + (px[i + 2] >> 4);
        counts.set(key, (counts.get(key) || 0) + 1);
      }
      let bg = 0;
      let bgCount = -1;
      for (const [key, n] of counts) if (n > bgCount) [bg, bgCount] = [key, n];
      const [r0, g0, b0] = [(bg >> 8) * 16 + 8, ((bg >> 4) & 15) * 16 + 8, (bg & 15) * 16 + 8];
      let differing = 0;
      for (let i = 0; i < px.length; i += 4) {
        const d = Math.abs(px[i] - r0) + Math.abs(px[i + 1] - g0) + Math.abs(px[i + 2] - b0);
        if (d > 48) differing++;
      }
      return { width: c.width, height: c.height, differing: differing / (px.length / 4), colours: counts.size };
    }, shot.toString("base64"));
    const requests = seen.images.length;
    const drawn = stats.differing > 0.05 && stats.colours > 16;
    if (drawn && requests === lastRequests) {
      if (!stableSince) stableSince = Date.now();
      if (Date.now() - stableSince > 1500) break; // no new tiles for 1.5 s: the view has settled
    } else {
      stableSince = 0;
    }
    lastRequests = requests;
    await page.waitForTimeout(250);
  }
  seen.canvas = stats;
  await page.screenshot({ path: outPng });
  seen.screenshot = outPng;
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
process.stdout.write(JSON.stringify(seen) + "\n");
