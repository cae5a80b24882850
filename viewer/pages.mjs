// Drive imagesvc's pages in headless Chromium the way a person would, and print what was seen as one JSON object.
//
//   node viewer/pages.mjs <site-url> <out-dir> <scenario> [timeout-ms] [query]
//
// Scenarios: journey (search, open a result, deep zoom, text, copy a citation), missing (a page with no image),
// rtl (a right-to-left book), nojs (search and reading with JavaScript off), phone (a small screen), keyboard,
// query (type [query] into the search box, in any script, and read the results and the URL).
// Screenshots go to <out-dir>. Only loopback may be contacted: anything else is aborted and listed under "blocked".
// Exit status 0 when the scenario ran (the caller judges the JSON), 2 on bad arguments, 1 on a crash.
import { chromium } from "playwright-core";

const [site, outDir, scenario, timeoutArg, queryArg] = process.argv.slice(2);
if (!site || !outDir || !scenario) {
  console.error("usage: node pages.mjs <site-url> <out-dir> <scenario> [timeout-ms]");
  process.exit(2);
}
const timeout = Number(timeoutArg || 30000);
const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);
const IIIF_IMAGE = /\/iiif\/3\/([^/]+)\/([^/]+)\/([^/]+)\/([^/]+)\/([^/.]+)\.(jpg|png|webp)(\?|$)/;

const seen = { scenario, blocked: [], errors: [], iiif: [], failed: [] };
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
  ],
});

async function open(options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...options });
  await context.route("**/*", (route) => {
    const url = new URL(route.request().url());
    if (url.protocol === "data:" || url.protocol === "blob:" || LOOPBACK.has(url.hostname)) return route.continue();
    seen.blocked.push(url.href);
    return route.abort("blockedbyclient");
  });
  const page = await context.newPage();
  page.setDefaultTimeout(timeout);
  page.on("pageerror", (err) => seen.errors.push(String(err)));
  page.on("response", (resp) => {
    const url = resp.url();
    if (resp.status() >= 400) seen.failed.push({ url, status: resp.status() });
    const m = IIIF_IMAGE.exec(url);
    if (m) seen.iiif.push({ id: decodeURIComponent(m[1]), status: resp.status(), type: resp.headers()["content-type"] || "" });
  });
  return { context, page };
}

const text = (page, selector) => page.locator(selector).first().innerText();
const box = (page, selector) => page.locator(selector).first().boundingBox();

async function journey() {
  const { context, page } = await open();
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: new URL(site).origin });
  await page.goto(site + "/");
  await page.fill("#f-q", "furnace");
  await Promise.all([page.waitForURL(/[?&]q=furnace/), page.press("#f-q", "Enter")]);
  seen.searchUrl = page.url();
  seen.results = await page.locator("ol.grid > li.card").count();
  seen.firstDescription = await text(page, "li.card .desc");
  seen.firstAlt = await page.locator("li.card img").first().getAttribute("alt");
  await page.screenshot({ path: `${outDir}/gallery.png` });
  await Promise.all([page.waitForURL(/\/book\/.+\?page=\d+/), page.locator("li.card a.thumb").first().click()]);
  seen.readingUrl = page.url();
  await page.waitForFunction(() => document.documentElement.dataset.viewer === "ready" && Number(document.documentElement.dataset.tiles || 0) > 0);
  // Let the view settle: no new tile for a second.
  let last = -1;
  for (let i = 0; i < 40; i++) {
    const now = Number(await page.evaluate(() => document.documentElement.dataset.tiles || 0));
    if (now === last) break;
    last = now;
    await page.waitForTimeout(1000);
  }
  seen.tilesDrawn = last;
  seen.overlays = await page.locator(".openseadragon-container a.outline").count();
  seen.ocr = await text(page, ".col-ocr .body");
  seen.translation = await text(page, ".col-translation .body");
  await page.click("button[data-copy=cite-inline]");
  await page.waitForFunction(() => document.querySelector("button[data-copy=cite-inline]").textContent !== "Copy");
  seen.copyButton = await text(page, "button[data-copy=cite-inline]");
  seen.inline = await text(page, "#cite-inline");
  seen.clipboard = await page.evaluate(() => navigator.clipboard.readText());
  await page.waitForTimeout(300);
  await page.screenshot({ path: `${outDir}/reading.png`, fullPage: true });
  await context.close();
}

async function missing() {
  const { context, page } = await open();
  const resp = await page.goto(site + "/book/demo-traite-des-mines?page=7");
  seen.status = resp.status();
  seen.note = await text(page, "#image-unavailable");
  seen.noteVisible = await page.locator("#image-unavailable").isVisible();
  seen.zoom = await page.locator("#zoom").count();
  seen.ocr = await text(page, ".col-ocr .body");
  await page.waitForTimeout(500);
  seen.viewer = await page.evaluate(() => document.documentElement.dataset.viewer || null);
  await context.close();
}

async function rtl() {
  const { context, page } = await open();
  await page.goto(site + "/book/demo-sefer-maarekhet-ha-kokhavim?page=2");
  seen.prev = await box(page, "nav.pager a.prev");
  seen.next = await box(page, "nav.pager a.next");
  seen.ocrDirection = await page.locator(".col-ocr .body").evaluate((el) => getComputedStyle(el).direction);
  seen.ocrLang = await page.locator(".col-ocr .body").getAttribute("lang");
  seen.imageBox = await box(page, "section.image");
  seen.textBox = await box(page, "section.text");
  await page.waitForFunction(() => Number(document.documentElement.dataset.tiles || 0) > 0);
  seen.tilesDrawn = Number(await page.evaluate(() => document.documentElement.dataset.tiles));
  await page.waitForTimeout(1500);
  await page.screenshot({ path: `${outDir}/rtl.png` });
  await page.locator("p.byline").click();
  await Promise.all([page.waitForURL(/page=3/), page.keyboard.press("ArrowLeft")]);
  seen.afterArrowLeft = page.url();
  await page.goto(site + "/book/demo-sefer-maarekhet-ha-kokhavim");
  seen.thumb1 = await box(page, "ol.pages li:nth-child(1)");
  seen.thumb2 = await box(page, "ol.pages li:nth-child(2)");
  await context.close();
}

async function nojs() {
  const { context, page } = await open({ javaScriptEnabled: false });
  await page.goto(site + "/");
  await page.fill("#f-q", "furnace");
  await Promise.all([page.waitForURL(/[?&]q=furnace/), page.press("#f-q", "Enter")]);
  seen.results = await page.locator("ol.grid > li.card").count();
  await page.goto(site + "/book/demo-speculum-fornacum?page=2");
  await page.waitForFunction(() => document.querySelector(".zoom img").complete, null, { timeout }).catch(() => {});
  seen.imageWidth = await page.locator(".zoom img").evaluate((img) => img.naturalWidth);
  seen.imageSrc = await page.locator(".zoom img").getAttribute("src");
  seen.outlines = await page.locator(".zoom a.outline").count();
  seen.outlineBox = await box(page, ".zoom a.outline");
  seen.ocr = await text(page, ".col-ocr .body");
  seen.inline = await text(page, "#cite-inline");
  seen.copyVisible = await page.locator("button[data-copy=cite-inline]").isVisible();
  await context.close();
}

async function phone() {
  const { context, page } = await open({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  seen.widths = {};
  for (const path of ["/?q=furnace", "/book/demo-speculum-fornacum?page=2", "/book/demo-speculum-fornacum", "/collections"]) {
    await page.goto(site + path);
    seen.widths[path] = await page.evaluate(() => document.documentElement.scrollWidth);
  }
  seen.viewport = 390;
  await page.goto(site + "/book/demo-speculum-fornacum?page=2");
  await page.waitForFunction(() => document.documentElement.dataset.viewer === "ready").catch(() => {});
  await page.screenshot({ path: `${outDir}/phone.png` });
  await context.close();
}

async function keyboard() {
  const { context, page } = await open();
  await page.goto(site + "/");
  seen.focus = [];
  for (let i = 0; i < 10; i++) {
    await page.keyboard.press("Tab");
    const at = await page.evaluate(() => {
      const el = document.activeElement;
      return { tag: el.tagName.toLowerCase(), id: el.id, text: (el.textContent || "").trim().slice(0, 40) };
    });
    seen.focus.push(at);
    if (at.id === "f-q") break;
  }
  await page.keyboard.type("sun");
  await Promise.all([page.waitForURL(/q=sun/), page.keyboard.press("Enter")]);
  seen.url = page.url();
  // Tab to the first result and open it with Enter.
  for (let i = 0; i < 40; i++) {
    await page.keyboard.press("Tab");
    if (await page.evaluate(() => document.activeElement.matches("li.card a.thumb"))) break;
  }
  await Promise.all([page.waitForURL(/\/book\//), page.keyboard.press("Enter")]);
  seen.opened = page.url();
  await context.close();
}

async function query() {
  const { context, page } = await open();
  await page.goto(site + "/");
  await page.fill("#f-q", queryArg);
  await Promise.all([page.waitForURL(/[?&]q=/), page.press("#f-q", "Enter")]);
  seen.url = page.url();
  seen.field = await page.inputValue("#f-q");
  seen.descriptions = await page.locator("li.card .desc").allInnerTexts();
  await context.close();
}

const scenarios = { journey, missing, rtl, nojs, phone, keyboard, query };
try {
  if (!scenarios[scenario]) throw new Error(`unknown scenario ${scenario}`);
  await scenarios[scenario]();
} catch (err) {
  seen.crash = String(err && err.stack ? err.stack : err);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + "\n");
