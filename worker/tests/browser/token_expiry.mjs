// Drives the dashboard at /ui in Debian's headless Chromium through
// playwright-core: signs in with a token that expires a few seconds later,
// opens a deployment whose build is still running (its channel and its
// log streaming), and waits for the api to end the streams with a
// `token_expired` event. worker/tests/it/dashboard.rs runs it as `node
// token_expiry.mjs` with:
//   UI_URL          the dashboard (http://127.0.0.1:<port>/ui)
//   SLIPWAY_TOKEN   a bearer token for the deployment, expiring soon
//   DEPLOYMENT_ID   the deployment to open
// It prints one JSON object on stdout ({"seen", "status", "token_form",
// "token_in_session", "requests_after"}: requests the page made after the
// expiry, which should be none) and exits 0, or non-zero with a sentence on
// stderr.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

function env(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`token_expiry.mjs: set ${name}`);
    process.exit(2);
  }
  return value;
}

const uiUrl = env("UI_URL");
const token = env("SLIPWAY_TOKEN");
const deployment = env("DEPLOYMENT_ID");

const profile = mkdtempSync(join(tmpdir(), "slipway-chromium-"));
const out = { requests_after: [] };
let context;
let page;
let code = 0;
let expired = false;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  page = context.pages()[0] || (await context.newPage());
  page.on("request", (r) => {
    if (expired) {
      out.requests_after.push(`${r.method()} ${r.url()}`);
    }
  });
  await page.goto(uiUrl, { timeout: 60000 });
  await page.waitForSelector("#token-form:not([hidden])", { timeout: 30000 });
  await page.fill("#token-input", token);
  await page.click("#token-form button[type=submit]");
  await page.waitForSelector("section.deployments", { timeout: 30000 });
  await page.evaluate((id) => { location.hash = `#/deployments/${encodeURIComponent(id)}`; }, deployment);
  await page.waitForSelector(`section.deployment[data-deployment="${deployment}"]`, { timeout: 30000 });
  // The api ends both streams when the token expires; the page says so.
  await page.waitForFunction(() => window.slipwayDashboard.tokenExpired === true, null, { timeout: 60000 });
  expired = true;
  await page.waitForSelector("#token-form:not([hidden])", { timeout: 10000 });
  out.seen = await page.evaluate(() => window.slipwayDashboard);
  out.status = await page.textContent("#status");
  out.token_form = await page.isVisible("#token-form");
  out.token_in_session = await page.evaluate(() => sessionStorage.getItem("slipway.token") !== null);
  // Past the longest reconnection wait (5 s): a page that reopened its
  // streams would have asked for tickets by now.
  await page.waitForTimeout(6000);
  process.stdout.write(JSON.stringify(out) + "\n");
} catch (e) {
  console.error(`token_expiry.mjs: ${e && e.stack ? e.stack : e}`);
  const shown = page ? await page.evaluate(() => document.body.innerText).catch(() => null) : null;
  console.error(`token_expiry.mjs: the page shows: ${JSON.stringify(shown)}`);
  code = 1;
} finally {
  if (context) {
    await context.close().catch(() => {});
  }
  rmSync(profile, { recursive: true, force: true });
}
process.exit(code);
