// Drives the dashboard's webhooks page (/ui, #/webhooks) in Debian's
// headless Chromium through playwright-core: pastes an operator's token,
// opens the webhooks page from the navigation and reads what it shows of
// one endpoint. worker/tests/it/webhooks.rs runs it as `node webhooks.mjs` with:
//   UI_URL          the dashboard (http://127.0.0.1:<port>/ui)
//   SLIPWAY_TOKEN   an operator's bearer token
//   WEBHOOK_ID      the endpoint to read
// It prints one JSON object on stdout ({"nav", "enabled", "disabled",
// "deliveries": [{"id", "status", "text"}], "html", "page_errors",
// "request_urls"}) and exits 0, or non-zero with a sentence on stderr.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

function env(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`webhooks.mjs: set ${name}`);
    process.exit(2);
  }
  return value;
}

const uiUrl = env("UI_URL");
const token = env("SLIPWAY_TOKEN");
const webhook = env("WEBHOOK_ID");

const profile = mkdtempSync(join(tmpdir(), "slipway-chromium-"));
const out = { page_errors: [], request_urls: [] };
let context;
let page;
let code = 0;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  page = context.pages()[0] || (await context.newPage());
  page.on("pageerror", (e) => out.page_errors.push(String(e)));
  page.on("request", (r) => out.request_urls.push(r.url()));

  const answer = await page.goto(uiUrl, { timeout: 60000 });
  if (!answer || !answer.ok()) {
    throw new Error(`${uiUrl} answered ${answer && answer.status()}`);
  }
  await page.waitForSelector("#token-form:not([hidden])", { timeout: 30000 });
  await page.fill("#token-input", token);
  await page.click("#token-form button[type=submit]");
  await page.waitForSelector("section.deployments", { timeout: 30000 });
  out.nav = await page.isVisible("#nav-webhooks");
  await page.click("#nav-webhooks");
  const article = `article.webhook[data-webhook="${webhook}"]`;
  await page.waitForSelector(`${article} table.deliveries tr[data-delivery]`, { timeout: 30000 });
  out.enabled = await page.textContent(`${article} h3`);
  out.disabled = await page.$eval(article, (a) => a.querySelector("dd.disabled-reason")?.innerText ?? null);
  out.deliveries = await page.$$eval(`${article} table.deliveries tbody tr`, (rows) =>
    rows.map((r) => ({ id: r.dataset.delivery, status: r.dataset.status, text: r.innerText })));
  out.html = await page.evaluate(() => document.documentElement.outerHTML);
  process.stdout.write(JSON.stringify(out) + "\n");
} catch (e) {
  console.error(`webhooks.mjs: ${e && e.stack ? e.stack : e}`);
  const shown = page ? await page.evaluate(() => document.body.innerText).catch(() => null) : null;
  console.error(`webhooks.mjs: the page shows: ${JSON.stringify(shown)}; ${JSON.stringify(out)}`);
  code = 1;
} finally {
  if (context) {
    await context.close().catch(() => {});
  }
  rmSync(profile, { recursive: true, force: true });
}
process.exit(code);
