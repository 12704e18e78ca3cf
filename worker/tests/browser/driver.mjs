// Drives page.html in Debian's headless Chromium through playwright-core
// (installed by `scripts/install-deps --browser`; it downloads no browser).
// worker/tests/it/browser.rs runs it as `node driver.mjs` with:
//   PAGE_URL        the page, served by the test from an allowed origin
//   API_URL         the api's base URL (another origin)
//   SLIPWAY_TOKEN   a bearer token for the deployment
//   DEPLOYMENT_ID   the deployment to delete
//   CALLBACK_URL    where the api pushes once the destroy is idle
//   CALLBACK_TOKEN  the bearer token of that push
//   RESULT_TIMEOUT_MS  how long to wait for the page's result (default 150000)
//   SCREENSHOT      optional: a PNG of the page at the end
// It prints one JSON object on stdout: {"result": <the page's #result>,
// "console": [...], "page_errors": [...], "failed_requests": [...],
// "request_urls": every URL the page requested}, and
// exits 0 once the page wrote its result (whatever it says), non-zero with
// a sentence on stderr otherwise.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

function env(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`driver.mjs: set ${name}`);
    process.exit(2);
  }
  return value;
}

const config = {
  api: env("API_URL"),
  token: env("SLIPWAY_TOKEN"),
  deployment: env("DEPLOYMENT_ID"),
  callbackUrl: env("CALLBACK_URL"),
  callbackToken: env("CALLBACK_TOKEN"),
};
const pageUrl = env("PAGE_URL");
const timeout = Number(process.env.RESULT_TIMEOUT_MS || 150000);

const profile = mkdtempSync(join(tmpdir(), "slipway-chromium-"));
const seen = { console: [], page_errors: [], failed_requests: [], request_urls: [] };
let context;
let page;
let code = 0;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  page = context.pages()[0] || (await context.newPage());
  page.on("console", (m) => seen.console.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => seen.page_errors.push(String(e)));
  page.on("request", (r) => seen.request_urls.push(r.url()));
  page.on("requestfailed", (r) => seen.failed_requests.push(`${r.method()} ${r.url()}: ${r.failure()?.errorText}`));

  const answer = await page.goto(pageUrl, { timeout: 60000 });
  if (!answer || !answer.ok()) {
    throw new Error(`${pageUrl} answered ${answer && answer.status()}`);
  }
  await page.waitForFunction(() => typeof window.slipwayDelete === "function", null, { timeout: 60000 });
  // Not awaited inside the page: the page reports through #result.
  await page.evaluate((c) => {
    window.slipwayDelete(c);
  }, config);
  await page.waitForSelector("#result[data-done=true]", { state: "attached", timeout });
  const result = JSON.parse(await page.textContent("#result"));
  if (process.env.SCREENSHOT) {
    await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
  }
  process.stdout.write(JSON.stringify({ result, ...seen }) + "\n");
} catch (e) {
  console.error(`driver.mjs: ${e && e.stack ? e.stack : e}`);
  const shown = page ? await page.evaluate(() => document.body.innerText).catch(() => null) : null;
  console.error(`driver.mjs: the page shows: ${JSON.stringify(shown)}; console etc.: ${JSON.stringify(seen)}`);
  code = 1;
} finally {
  if (context) {
    await context.close().catch(() => {});
  }
  rmSync(profile, { recursive: true, force: true });
}
process.exit(code);
