// Drives the admin page in headless Chromium against a running `karpenter simulate --admin`
// with a token: the page loads without console errors, asks for the token like the JSON does,
// shows the NodeClaims the JSON shows, updates as the simulation runs, and follows an explain
// link to the text and the JSON. Keeps screenshots under ARTIFACT_DIR.
//
// Environment: KARPENTER_BIN (the binary), ARTIFACT_DIR (where screenshots go),
// CHROMIUM (default /usr/bin/chromium). Everything stays on 127.0.0.1; every wait is bounded;
// the simulation is stopped however the test ends.

import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const BIN = process.env.KARPENTER_BIN;
const ARTIFACTS = process.env.ARTIFACT_DIR;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const TOKEN = "browser-test-token";

if (!BIN || !ARTIFACTS) {
  console.error("KARPENTER_BIN and ARTIFACT_DIR must be set (scripts/browser-test.sh sets them)");
  process.exit(2);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, timeoutMs, check) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    await sleep(250);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${last.message}` : ""}`);
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

const work = mkdtempSync(join(tmpdir(), "karpenter-browser-"));
mkdirSync(ARTIFACTS, { recursive: true });
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const auth = { Authorization: `Bearer ${TOKEN}` };
const json = async (path) => {
  const response = await fetch(base + path, { headers: auth });
  assert(response.ok, `${path}: ${response.status}`);
  return response.json();
};

// An hour of simulated time in 90 s: long enough for the whole test, short enough to watch it change.
const sim = spawn(BIN, [
  "simulate", "--journal", join(work, "journal"), "--admin", `127.0.0.1:${port}`,
  "--admin-token", TOKEN, "--pace", "40", "--quiet",
], { stdio: ["ignore", "ignore", "pipe"] });
let simErr = "";
sim.stderr.on("data", (chunk) => { simErr += chunk; });
let simExited = null;
sim.on("exit", (code, signal) => { simExited = { code, signal }; });

let browser;
const consoleErrors = [];
try {
  await until("the admin endpoint", 30_000, async () => {
    if (simExited) throw new Error(`simulate exited early (${JSON.stringify(simExited)}): ${simErr}`);
    return (await fetch(`${base}/healthz`)).ok;
  });

  // The page is protected exactly like the JSON: no token, no page, and a Basic challenge.
  const refused = await fetch(`${base}/`);
  assert(refused.status === 401, `/ without a token answered ${refused.status}`);
  assert(/^Basic /.test(refused.headers.get("www-authenticate") || ""), "no Basic challenge on 401");
  assert(!(await refused.text()).includes("nodeclaim"), "a refusal leaked state");
  const wrong = await fetch(`${base}/nodeclaims`, { headers: { Authorization: "Basic " + Buffer.from("admin:wrong").toString("base64") } });
  assert(wrong.status === 401, `a wrong Basic password answered ${wrong.status}`);

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const context = await browser.newContext({
    httpCredentials: { username: "admin", password: TOKEN },
    viewport: { width: 1440, height: 1000 },
  });
  const page = await context.newPage();
  page.on("console", (message) => {
    if (message.type() === "error") consoleErrors.push(`${message.text()} (${message.location().url})`);
  });
  page.on("pageerror", (error) => consoleErrors.push(String(error)));
  page.on("response", (response) => {
    if (response.status() >= 400) consoleErrors.push(`${response.status()} from ${response.url()}`);
  });
  page.setDefaultTimeout(20_000);

  await page.goto(`${base}/`);
  const refreshes = async () => Number(await page.getAttribute("#refreshed", "data-count"));
  await until("a first refresh", 20_000, async () => (await refreshes()) >= 1);
  await until("NodeClaims on the page", 60_000, async () => (await page.locator("#nodeclaims tr[data-nodeclaim]").count()) > 0);

  // The page shows the NodeClaims the JSON shows: compare a JSON read with the page's next
  // whole refresh; the cluster moves meanwhile, so retry until one pair agrees.
  let matched = null;
  for (let attempt = 1; attempt <= 20 && !matched; attempt++) {
    const before = await refreshes();
    const fromJson = await json("/nodeclaims");
    await until("two more refreshes", 15_000, async () => (await refreshes()) >= before + 2);
    const rows = await page.$$eval("#nodeclaims tr[data-nodeclaim]", (trs) => trs.map((tr) => ({
      name: tr.dataset.nodeclaim,
      state: tr.children[2].textContent,
      type: tr.children[3].textContent,
    })));
    const expected = fromJson.map((c) => ({ name: c.name, state: c.state, type: c.instance ? c.instance.instance_type : "-" }))
      .sort((a, b) => a.name.localeCompare(b.name));
    if (JSON.stringify(rows) === JSON.stringify(expected)) matched = { attempt, count: rows.length };
  }
  assert(matched, "the page never showed the NodeClaims the JSON showed (20 attempts)");

  const pools = await json("/nodepools");
  assert(await page.locator("#nodepools tbody tr").count() === pools.length, "NodePool rows differ from /nodepools");
  assert(await page.locator("#actors li[data-actor='scheduler']").count() === 1, "no scheduler in the actor tree");
  const overlays = await page.locator("#overlays tbody").textContent();
  assert(overlays.includes("NodeOverlay gate off"), `the overlays table says ${JSON.stringify(overlays)}`);

  // It updates as the simulation runs: the simulated time moves on.
  const simulatedTime = () => page.locator("#summary dd").first().textContent();
  const firstTime = await simulatedTime();
  await until("the simulated time to move", 20_000, async () => (await simulatedTime()) !== firstTime);
  const lastTime = await simulatedTime();

  await page.screenshot({ path: join(ARTIFACTS, "admin-page.png"), fullPage: true });

  // Each NodeClaim links to its explanation, as text and as JSON.
  const name = await page.locator("#nodeclaims tr[data-nodeclaim]").first().getAttribute("data-nodeclaim");
  await page.locator(`#nodeclaims tr[data-nodeclaim="${name}"] a.explain-text`).click();
  await page.waitForURL(/format=text/);
  const text = await page.locator("body").textContent();
  assert(text.startsWith(`nodeclaim/${name}`), `the text explanation starts ${JSON.stringify(text.slice(0, 60))}`);
  assert(/planned by (round|disruption command) \d+/.test(text), "the text explanation names no round or command");
  writeFileSync(join(ARTIFACTS, "explain.txt"), text);
  await page.screenshot({ path: join(ARTIFACTS, "explain-text.png") });
  await page.goBack();
  await until("the page back with its row", 20_000, async () => (await page.locator(`#nodeclaims tr[data-nodeclaim="${name}"]`).count()) === 1);
  await page.locator(`#nodeclaims tr[data-nodeclaim="${name}"] a.explain-json`).click();
  await page.waitForURL(new RegExp(`/explain/nodeclaim/${name}$`));
  const explained = JSON.parse(await page.locator("body").textContent());
  assert(explained.nodeclaim === name, "the JSON explanation names another NodeClaim");
  assert(explained.events.length > 0 && explained.events.every((e) => e.entity === `NodeClaim/${name}`), "the JSON explanation holds no events of it");

  assert(consoleErrors.length === 0, `console errors: ${consoleErrors.join(" | ")}`);
  console.log(`browser: admin page ok: ${matched.count} NodeClaims as /nodeclaims shows them (attempt ${matched.attempt}), ${pools.length} NodePools, simulated time ${firstTime} -> ${lastTime}, explain ${name} followed as text and JSON, 0 console errors; screenshots in ${ARTIFACTS}`);
} catch (error) {
  console.error(`browser: FAILED: ${error.message}`);
  if (consoleErrors.length) console.error(`console errors: ${consoleErrors.join(" | ")}`);
  if (simErr) console.error(`simulate's stderr (last 2000 chars): ${simErr.slice(-2000)}`);
  process.exitCode = 1;
} finally {
  if (browser) await browser.close().catch(() => {});
  if (!simExited) {
    sim.kill("SIGTERM");
    const stopped = await Promise.race([new Promise((r) => sim.once("exit", () => r(true))), sleep(10_000).then(() => false)]);
    if (!stopped) sim.kill("SIGKILL");
  }
  rmSync(work, { recursive: true, force: true });
}
