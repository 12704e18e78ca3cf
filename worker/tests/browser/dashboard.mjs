// Drives the dashboard at /ui in Debian's headless Chromium through
// playwright-core, as a person would: pastes a token, submits a
// configuration from the page, watches the deployment go from building to
// active with its build log streaming in, then opens the queues and workers.
// worker/tests/it/dashboard.rs runs it as `node dashboard.mjs` with:
//   UI_URL          the dashboard (http://127.0.0.1:<port>/ui)
//   SLIPWAY_TOKEN   a bearer token for every deployment
//   DEPLOYMENT_ID   the deployment to submit
//   CONFIGURATION   a file holding the configuration (JSON)
//   RESULT_TIMEOUT_MS  how long the deploy may take (default 150000)
//   SCREENSHOT      where to save a PNG of the page once the deploy is active
// It prints one JSON object on stdout ({"seen", "log", "state", "build",
// "report_nodes", "instances", "fleet", "console", "page_errors",
// "failed_requests", "request_urls": every URL the page requested}) and exits 0, or non-zero with a sentence on stderr.
import { chromium } from "playwright-core";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

function env(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`dashboard.mjs: set ${name}`);
    process.exit(2);
  }
  return value;
}

const uiUrl = env("UI_URL");
const token = env("SLIPWAY_TOKEN");
const deployment = env("DEPLOYMENT_ID");
const configuration = readFileSync(env("CONFIGURATION"), "utf8");
const screenshot = env("SCREENSHOT");
const timeout = Number(process.env.RESULT_TIMEOUT_MS || 150000);

const profile = mkdtempSync(join(tmpdir(), "slipway-chromium-"));
const out = { console: [], page_errors: [], failed_requests: [], request_urls: [] };
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
  page.on("console", (m) => out.console.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => out.page_errors.push(String(e)));
  // Every request's URL (fetches, EventSources, the page's files): the test
  // checks that none carries the token.
  page.on("request", (r) => out.request_urls.push(r.url()));
  page.on("requestfailed", (r) => {
    // A stream the page closes itself (leaving a view, a log that ended) is not a failure.
    if (r.failure()?.errorText !== "net::ERR_ABORTED") {
      out.failed_requests.push(`${r.method()} ${r.url().replace(/access_token=[^&]+/, "access_token=…")}: ${r.failure()?.errorText}`);
    }
  });

  const answer = await page.goto(uiUrl, { timeout: 60000 });
  if (!answer || !answer.ok()) {
    throw new Error(`${uiUrl} answered ${answer && answer.status()}`);
  }
  // Sign in: the token goes into the form, and from there into this tab only.
  await page.waitForSelector("#token-form:not([hidden])", { timeout: 30000 });
  await page.fill("#token-input", token);
  await page.click("#token-form button[type=submit]");
  await page.waitForSelector("section.deployments", { timeout: 30000 });
  out.empty_list = (await page.textContent("section.deployments")).includes("No deployments yet.");
  out.fleet_link = await page.isVisible("#nav-fleet");
  out.token_in_session = await page.evaluate(() => sessionStorage.getItem("slipway.token") !== null);
  out.token_in_local = await page.evaluate(() => localStorage.length);

  // Submit from the page.
  await page.click("a[href='#/submit']");
  await page.waitForSelector("#submit-form:not([hidden])", { timeout: 30000 });
  await page.fill("#submit-id", deployment);
  await page.fill("#submit-configuration", configuration);
  await page.click("#submit-form button[type=submit]");

  // The deploy, watched: active, and its build finished with its report.
  await page.waitForSelector(`section.deployment[data-deployment="${deployment}"]`, { timeout: 60000 });
  await page.waitForSelector("section.deployment[data-state=active]", { timeout });
  await page.waitForSelector("section.build[data-status=succeeded][data-live=false] table.report", { timeout: 60000 });
  out.seen = await page.evaluate(() => window.slipwayDashboard);
  out.log = await page.textContent("#build-log");
  out.state = await page.getAttribute("section.deployment", "data-state");
  out.build = await page.getAttribute("section.build", "data-build");
  out.report_nodes = await page.$$eval("table.report tbody tr", (rows) => rows.map((r) => r.innerText));
  out.instances = await page.$$eval("table.instances tbody tr", (rows) => rows.map((r) => r.innerText));
  out.status = await page.textContent("#status");
  out.forms_shown = (await page.isVisible("#token-form")) || (await page.isVisible("#submit-form"));
  await page.screenshot({ path: screenshot, fullPage: true });

  // The queues and workers.
  await page.click("#nav-fleet");
  await page.waitForSelector("table.workers tr[data-worker] .s-alive", { timeout: 30000 });
  out.fleet = {
    queues: await page.$$eval("table.queues tbody tr", (rows) => rows.map((r) => r.innerText)),
    workers: await page.$$eval("table.workers tbody tr", (rows) => rows.map((r) => r.innerText)),
  };
  process.stdout.write(JSON.stringify(out) + "\n");
} catch (e) {
  console.error(`dashboard.mjs: ${e && e.stack ? e.stack : e}`);
  const shown = page ? await page.evaluate(() => document.body.innerText).catch(() => null) : null;
  const seen = page ? await page.evaluate(() => window.slipwayDashboard).catch(() => null) : null;
  console.error(`dashboard.mjs: the page shows: ${JSON.stringify(shown)}; it saw ${JSON.stringify(seen)}; ` +
    `console etc.: ${JSON.stringify(out)}`);
  code = 1;
} finally {
  if (context) {
    await context.close().catch(() => {});
  }
  rmSync(profile, { recursive: true, force: true });
}
process.exit(code);
