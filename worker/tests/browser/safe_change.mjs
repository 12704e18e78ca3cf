// Drives the dashboard's safe-change buttons in Debian's headless Chromium
// through playwright-core, as a person would: opens a deployment that has a
// successful deploy and a plan, reads the plan's per-node diff, clicks
// Apply on the plan and waits for the apply to succeed, clicks Apply on the
// same plan again (now stale: the page shows the api's refusal), then
// clicks Rollback on the first deploy and waits for the rollback to succeed.
// Every confirmation the page asks for is accepted.
// worker/tests/it/dashboard.rs runs it as `node safe_change.mjs` with:
//   UI_URL          the dashboard (http://127.0.0.1:<port>/ui)
//   SLIPWAY_TOKEN   a bearer token for the deployment
//   DEPLOYMENT_ID   the deployment
//   PLAN_ID         the plan (a dry run that succeeded) to apply
//   TARGET_ID       the earlier deploy to roll back to
//   RESULT_TIMEOUT_MS  how long each build may take (default 150000)
// It prints one JSON object on stdout ({"plan_rows", "builds_rows",
// "applied", "stale", "rolled_back", "dialogs", "seen", "console",
// "page_errors", "failed_requests"}) and exits 0, or non-zero with a
// sentence on stderr.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

function env(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`safe_change.mjs: set ${name}`);
    process.exit(2);
  }
  return value;
}

const uiUrl = env("UI_URL");
const token = env("SLIPWAY_TOKEN");
const deployment = env("DEPLOYMENT_ID");
const plan = env("PLAN_ID");
const target = env("TARGET_ID");
const timeout = Number(process.env.RESULT_TIMEOUT_MS || 150000);

const profile = mkdtempSync(join(tmpdir(), "slipway-chromium-"));
const out = { console: [], page_errors: [], failed_requests: [], dialogs: [] };
let context;
let page;
let code = 0;

// Clicks the button of `action` on build `build`'s row of the builds list,
// then waits for the page's status line to say the api's answer.
async function click(action, build) {
  const before = await page.textContent("#status");
  await page.click(`table.builds tr[data-build="${build}"] button[data-action="${action}"]`);
  await page.waitForFunction(
    (before) => {
      const text = document.getElementById("status").textContent;
      return text !== before && / queued: build |^Not /.test(text);
    },
    before,
    { timeout: 30000 },
  );
  return page.textContent("#status");
}

// Waits until the page shows build `build` succeeded (its pane, followed
// through the deployment's channel).
async function succeeded(build) {
  await page.waitForSelector(`section.build[data-build="${build}"][data-status=succeeded][data-live=false]`, {
    timeout,
  });
}

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
  page.on("dialog", (d) => {
    out.dialogs.push(d.message());
    d.accept();
  });
  page.on("requestfailed", (r) => {
    if (r.failure()?.errorText !== "net::ERR_ABORTED") {
      out.failed_requests.push(`${r.method()} ${r.url()}: ${r.failure()?.errorText}`);
    }
  });

  const answer = await page.goto(uiUrl, { timeout: 60000 });
  if (!answer || !answer.ok()) {
    throw new Error(`${uiUrl} answered ${answer && answer.status()}`);
  }
  await page.waitForSelector("#token-form:not([hidden])", { timeout: 30000 });
  await page.fill("#token-input", token);
  await page.click("#token-form button[type=submit]");
  await page.waitForSelector("section.deployments", { timeout: 30000 });

  // The plan's own view: its per-node diff.
  await page.evaluate(([d, p]) => {
    location.hash = `#/deployments/${d}/builds/${p}`;
  }, [deployment, plan]);
  await page.waitForSelector(`section.build[data-build="${plan}"] table.plan tbody tr`, { timeout: 30000 });
  out.plan_rows = await page.$$eval("table.plan tbody tr", (rows) =>
    rows.map((r) => ({ node: r.dataset.node, action: r.dataset.action, text: r.innerText })));
  out.builds_rows = await page.$$eval("table.builds tbody tr", (rows) =>
    rows.map((r) => ({ build: r.dataset.build, trigger: r.dataset.trigger, text: r.innerText })));

  // Apply the plan: the page follows the deployment to the apply's end.
  out.applied = { status: await click("apply", plan) };
  out.applied.build = out.applied.status.match(/build (\S+)\.$/)?.[1] ?? null;
  if (!out.applied.build) {
    throw new Error(`the apply was not queued: ${out.applied.status}`);
  }
  await succeeded(out.applied.build);

  // The same plan again: stale now, and the page says why.
  await page.waitForSelector(`table.builds tr[data-build="${plan}"] button[data-action=apply]`, { timeout: 30000 });
  out.stale = { status: await click("apply", plan) };
  out.stale.error = await page.getAttribute("#status", "class");

  // Roll back to the first deploy.
  out.rolled_back = { status: await click("rollback", target) };
  out.rolled_back.build = out.rolled_back.status.match(/build (\S+)\.$/)?.[1] ?? null;
  if (!out.rolled_back.build) {
    throw new Error(`the rollback was not queued: ${out.rolled_back.status}`);
  }
  await succeeded(out.rolled_back.build);
  out.rolled_back.row = await page.textContent(`table.builds tr[data-build="${out.rolled_back.build}"]`);
  out.rolled_back.view = await page.textContent(`section.build[data-build="${out.rolled_back.build}"] dl`);
  out.seen = await page.evaluate(() => window.slipwayDashboard);
  process.stdout.write(JSON.stringify(out) + "\n");
} catch (e) {
  console.error(`safe_change.mjs: ${e && e.stack ? e.stack : e}`);
  const shown = page ? await page.evaluate(() => document.body.innerText).catch(() => null) : null;
  console.error(`safe_change.mjs: the page shows: ${JSON.stringify(shown)}; console etc.: ${JSON.stringify(out)}`);
  code = 1;
} finally {
  if (context) {
    await context.close().catch(() => {});
  }
  rmSync(profile, { recursive: true, force: true });
}
process.exit(code);
