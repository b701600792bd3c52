// Real-browser tests of the dashboard: headless Chromium (playwright-core) drives the page of a
// live `rebound-server dev` node; every test then checks the outcome through the API (the
// `rebound` CLI with --json, or the TypeScript SDK). scripts/test-ui starts the node and sets:
//   REBOUND_UI_URL, REBOUND_UI_GRPC, REBOUND_UI_ADMIN_TOKEN, REBOUND_UI_USER_TOKEN,
//   REBOUND_UI_USER_SERVICE, REBOUND_UI_SCREENSHOTS, REBOUND_CLI, REBOUND_SDK, REBOUND_CHROMIUM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { env, launchChromium } from "./browser.mjs";

const URL_ = env("REBOUND_UI_URL");
const GRPC = env("REBOUND_UI_GRPC");
const ADMIN = env("REBOUND_UI_ADMIN_TOKEN");
const USER = env("REBOUND_UI_USER_TOKEN");
const USER_SERVICE = env("REBOUND_UI_USER_SERVICE");
const SHOTS = env("REBOUND_UI_SCREENSHOTS");
const CLI = env("REBOUND_CLI");
const { Client, Executor, Outcome } = await import(env("REBOUND_SDK"));

const run = promisify(execFile);

/** `rebound --json ...` with the admin token: the parsed JSON document. */
async function cli(...args) {
	const { stdout } = await run(CLI, ["--addr", `http://${GRPC}`, "--token", ADMIN, "--json", ...args]);
	return JSON.parse(stdout);
}

async function serviceInfo(name) {
	const r = await cli("services");
	return r.services.find((s) => s.service === name);
}

async function stats() {
	const r = await cli("stats");
	return new Map(r.services.map((s) => [s.service, s]));
}

/** Polls `fn` until it returns a truthy value; fails with `what` after `ms`. */
async function waitFor(what, fn, ms = 20_000, every = 100) {
	const end = Date.now() + ms;
	let last;
	for (;;) {
		try {
			const v = await fn();
			if (v) return v;
		} catch (e) {
			last = e;
		}
		if (Date.now() > end)
			throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${last.message}` : ""}`);
		await new Promise((r) => setTimeout(r, every));
	}
}

let browser;
let admin; // Client with the admin token
const executors = [];

/** An executor on `service` with the admin token; handler(job) returns an Outcome. */
function startExecutor(service, handler) {
	const ex = new Executor(GRPC, service, handler, { token: ADMIN, concurrency: 4, followRing: false });
	const done = ex.run().catch((e) => e);
	const it = { ex, done, stop: async () => (ex.stop(), await done) };
	executors.push(it);
	return it;
}

/** The node's /api/v1/live for the admin token (from Node, not the page). */
async function liveOf(service) {
	const r = await fetch(`${URL_}/api/v1/live`, { headers: { Authorization: `Bearer ${ADMIN}` } });
	assert.equal(r.status, 200);
	const j = await r.json();
	return j.services.find((s) => s.service === service);
}

/** A fresh page (own context: own sessionStorage) at `width`, signed in with `token`. */
async function open(token, width = 1280, height = 900) {
	const context = await browser.newContext({ viewport: { width, height }, timezoneId: "Europe/Berlin" });
	if (token) {
		await context.addInitScript((t) => {
			if (!sessionStorage.getItem("rebound.init")) {
				sessionStorage.setItem("rebound.token", t);
				sessionStorage.setItem("rebound.init", "1");
			}
		}, token);
	}
	const page = await context.newPage();
	page.errors = [];
	page.on("pageerror", (e) => page.errors.push(`pageerror: ${e.message}`));
	page.on("console", (m) => {
		// A refused fetch (401/403/404) logs "Failed to load resource": that is expected here.
		if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) {
			page.errors.push(`console: ${m.text()}`);
		}
	});
	page.close_ = async () => {
		assert.deepEqual(page.errors, [], "no script errors or CSP violations on the page");
		await context.close();
	};
	return page;
}

/** The page's visible error messages, for a failure's report. */
async function alerts(page) {
	return page.$$eval('[role="alert"]:not([hidden]), [role="status"]', (els) =>
		els.map((e) => e.textContent).filter(Boolean),
	);
}

/** page.waitForFunction, failing with the page's error messages. */
async function waitOnPage(page, what, fn, arg) {
	try {
		await page.waitForFunction(fn, arg, { timeout: 20_000 });
	} catch (e) {
		throw new Error(`${what}: ${e.message}; errors on the page: ${JSON.stringify(await alerts(page))}`);
	}
}

async function go(page, hash) {
	await page.goto(`${URL_}/${hash}`);
	await page.waitForSelector("#nav a");
}

const DAY_MS = 86_400_000;

before(async () => {
	browser = await launchChromium();
	admin = await Client.connect(GRPC, { token: ADMIN });
	mkdirSync(SHOTS, { recursive: true });
});

after(async () => {
	for (const e of executors) await e.stop();
	admin?.close?.();
	await browser?.close();
});

describe("dashboard", { concurrency: false }, () => {
	test("overview figures equal GetStats for two services", async () => {
		const enq = (service, id, delayMs) => admin.enqueue({ service, transactionId: id, delayMs });
		for (let i = 0; i < 3; i++) await enq("t1-alpha", `hour-${i}`, 30 * 60_000);
		for (let i = 0; i < 2; i++) await enq("t1-alpha", `later-${i}`, 3 * DAY_MS);
		await enq("t1-alpha", "overdue-0", 0);
		for (let i = 0; i < 4; i++) await enq("t1-beta", `day-${i}`, 5 * 3600_000);
		await enq("t1-beta", "overdue-0", 0);
		await enq("t1-beta", "overdue-1", 0);
		// Nobody subscribes to these services: the due ones stay overdue once their window closed.
		await waitFor("both services' due retries to read as overdue", async () => {
			const s = await stats();
			return s.get("t1-alpha")?.bands.overdue === 1 && s.get("t1-beta")?.bands.overdue === 2;
		});

		const page = await open(ADMIN);
		await go(page, "#/");
		const read = async (service) =>
			page.$eval(`tr[data-service="${service}"]`, (tr) => {
				const out = {};
				for (const td of tr.querySelectorAll("[data-field]")) out[td.dataset.field] = td.dataset.value;
				return out;
			});
		await page.waitForSelector('tr[data-service="t1-beta"]');
		const shown = { alpha: await read("t1-alpha"), beta: await read("t1-beta") };
		const s = await stats();
		for (const [key, name] of [
			["alpha", "t1-alpha"],
			["beta", "t1-beta"],
		]) {
			const want = s.get(name);
			const got = shown[key];
			assert.equal(Number(got.pending), want.pending, `${name} pending`);
			assert.equal(Number(got.in_flight), want.in_flight, `${name} in_flight`);
			assert.equal(Number(got.dead_lettered), want.dead_lettered, `${name} dead_lettered`);
			assert.equal(got.paused, String(want.paused), `${name} paused`);
			for (const band of ["overdue", "within_minute", "within_hour", "within_day", "later"]) {
				assert.equal(Number(got[band]), want.bands[band], `${name} ${band}`);
			}
			assert.ok(got.oldest_due_age !== "", `${name} shows an oldest overdue age`);
		}
		assert.equal(Number(shown.alpha.within_hour), 3);
		assert.equal(Number(shown.beta.within_day), 4);
		// The time of the measurement is shown as a <time> with the UTC value.
		const measured = await page.$eval('[data-field="measured_at"] time', (t) => [t.dateTime, t.title]);
		assert.match(measured[0], /Z$/);
		assert.match(measured[1], /UTC/);

		// Refresh shows a new enqueue; the figures are not polled (no change without it).
		await enq("t1-alpha", "hour-3", 30 * 60_000);
		await page.click('[data-action="refresh"]');
		await waitFor(
			"the refreshed pending count",
			async () => Number((await read("t1-alpha")).within_hour) === 4,
		);
		await page.close_();
	});

	test("the overview lists the dependency holds; a saga step's page shows its compensation chain", async () => {
		await cli("holds", "set", "ui-gateway", "--duration", "5m", "--reason", "gateway maintenance");
		await cli(
			"enqueue",
			"t6-saga",
			"order-1/charge",
			"--delay",
			"1h",
			"--compensation",
			"t6-undo=order-1/void",
			"--compensation",
			"t6-undo=order-1/release",
		);
		const page = await open(ADMIN);
		await go(page, "#/");
		await page.waitForSelector('tr[data-hold="ui-gateway"]');
		const row = await page.textContent('tr[data-hold="ui-gateway"]');
		assert.match(row, /gateway maintenance/);
		assert.match(row, /admin/);
		await go(page, "#/retry/t6-saga/order-1%2Fcharge");
		await page.waitForSelector('[data-field="chain"]');
		const steps = await page.$$eval("[data-chain-step]", (li) => li.map((x) => x.textContent));
		assert.equal(steps.length, 2);
		assert.match(steps[0], /order-1\/void \(t6-undo\) PENDING/);
		assert.match(steps[1], /order-1\/release \(t6-undo\) PENDING/);
		await cli("holds", "release", "ui-gateway");
		await page.close_();
	});

	test("a retry's page shows each attempt as a timeline", async () => {
		const service = "t7-history";
		let calls = 0;
		const ex = startExecutor(service, () =>
			++calls === 1 ? Outcome.retry("gateway: 503", { afterMs: 200 }) : Outcome.success(),
		);
		await waitFor("the executor's subscription", async () => (await liveOf(service))?.subscribers >= 1);
		await admin.enqueue({ service, transactionId: "h-1", delayMs: 0 });
		// `rebound history` answers from the same GetRetry.
		const history = await waitFor("the retry to succeed", async () => {
			const r = await cli("history", service, "h-1");
			return r.status === "SUCCEEDED" && r;
		});
		assert.deepEqual(
			history.attempts.map((a) => a.outcome),
			["RETRY", "SUCCEEDED"],
		);
		assert.equal(history.attempts[0].retry_after, 0.2);
		await ex.stop();
		const page = await open(ADMIN);
		await go(page, `#/retry/${service}/h-1`);
		await page.waitForSelector("[data-attempts] tr[data-attempt]");
		const rows = await page.$$eval("[data-attempts] tr[data-attempt]", (trs) =>
			trs.map((tr) => ({
				attempt: tr.dataset.attempt,
				outcome: tr.querySelector('[data-field="outcome"]').dataset.value,
				executor: tr.querySelector('[data-field="executor_id"]').textContent,
				error: tr.querySelector('[data-field="error"]').textContent,
				gap: tr.querySelector('[data-field="gap"]').dataset.value,
			})),
		);
		assert.deepEqual(
			rows.map((r) => [r.attempt, r.outcome]),
			[
				["2", "RETRY"],
				["3", "SUCCEEDED"],
			],
		);
		assert.equal(rows[0].error, "gateway: 503");
		assert.notEqual(rows[0].executor, "–", "the executor is named");
		assert.ok(Number(rows[1].gap) >= 0.2, `the second attempt waited its retry_after: ${rows[1].gap}`);
		await page.locator("[data-attempts]").screenshot({ path: join(SHOTS, "retry-attempts.png") });
		await page.close_();
	});

	test("the retries page lists a service's scheduled retries and filters them", async () => {
		const service = "t8-list";
		for (const [id, customer, error] of [
			["l-1", "42", "card declined"],
			["l-2", "7", "gateway: 503"],
			["l-3", "42", "gateway: 503"],
		])
			await admin.enqueue({
				service,
				transactionId: id,
				delayMs: 3600_000,
				attributes: { customer },
				lastError: error,
			});
		const page = await open(ADMIN);
		await go(page, `#/retries/${service}`);
		await page.waitForSelector('[data-page="retries"] tr[data-transaction]');
		const ids = async () =>
			(
				await page.$$eval('[data-page="retries"] tr[data-transaction]', (trs) =>
					trs.map((t) => t.dataset.transaction),
				)
			).sort();
		assert.deepEqual(await ids(), ["l-1", "l-2", "l-3"]);
		await page.fill("#rt-attrs", "customer=42");
		await page.click('form[data-form="retries-filter"] button[type="submit"]');
		await waitFor("the attribute filter", async () => (await ids()).join() === "l-1,l-3");
		await page.fill("#rt-error", "gateway");
		await page.click('form[data-form="retries-filter"] button[type="submit"]');
		await waitFor("both filters", async () => (await ids()).join() === "l-3");
		await page.fill("#rt-attrs", "customer=0");
		await page.click('form[data-form="retries-filter"] button[type="submit"]');
		await page.waitForSelector('[data-empty="retries"]');
		// A bad filter is refused with the field named, and changes nothing.
		await page.fill("#rt-attrs", "novalue");
		await page.click('form[data-form="retries-filter"] button[type="submit"]');
		const alert = page.locator('[data-page="retries"] [role="alert"]:not([hidden])');
		await alert.waitFor();
		assert.match(await alert.textContent(), /attributes/);
		// Each row links to its retry's page.
		await page.fill("#rt-attrs", "");
		await page.fill("#rt-error", "");
		await page.click('form[data-form="retries-filter"] button[type="submit"]');
		await waitFor("the whole list again", async () => (await ids()).length === 3);
		await page.screenshot({ path: join(SHOTS, "retries.png"), fullPage: true });
		await page.click('tr[data-transaction="l-2"] a');
		await page.waitForSelector('[data-retry="l-2"]');
		await page.close_();
	});

	test("run now and cancel on the retries selected, after a confirmation that shows the count", async () => {
		const service = "t8-act";
		for (const id of ["a-1", "a-2", "a-3"])
			await admin.enqueue({ service, transactionId: id, delayMs: 3600_000 });
		const get = async (id) => cli("get", service, id);
		const page = await open(ADMIN);
		await go(page, `#/retries/${service}`);
		await page.waitForSelector('[data-page="retries"] tr[data-transaction]');
		assert.equal(await page.isDisabled('[data-action="run-now"]'), true, "nothing selected, nothing to run");
		await page.check('input[data-select="a-1"]');
		await page.check('input[data-select="a-3"]');
		assert.equal((await page.textContent('[data-action="run-now"]')).trim(), "Run now (2)…");
		// The dialog names the count; cancelling it changes nothing.
		await page.click('[data-action="run-now"]');
		const dialog = page.locator("dialog.confirm");
		await dialog.waitFor({ state: "visible" });
		assert.match(
			await dialog.locator('[data-field="confirm-text"]').textContent(),
			/^Run 2 selected retries of t8-act now\?/,
		);
		await page.screenshot({ path: join(SHOTS, "retries-run-now.png"), fullPage: true });
		await dialog.locator('[data-action="cancel"]').click();
		await dialog.waitFor({ state: "detached" });
		assert.equal((await get("a-1")).attempts.length, 0, "no action without a confirmation");
		await page.click('[data-action="run-now"]');
		await dialog.waitFor({ state: "visible" });
		await dialog.locator('[data-action="confirm"]').click();
		await waitOnPage(page, "the run-now to answer", () =>
			/2 changed/.test(document.querySelector('[data-field="action_progress"]')?.textContent ?? ""),
		);
		for (const id of ["a-1", "a-3"]) {
			const r = await get(id);
			assert.ok(Date.parse(r.due_time) < Date.now() + 60_000, `${id} is due now: ${r.due_time}`);
			assert.equal(r.attempts.at(-1).outcome, "RUN_NOW");
		}
		assert.ok(Date.parse((await get("a-2")).due_time) > Date.now() + 3000_000, "a-2 was not selected");
		// Cancel one: the dialog says it cannot be undone; it is gone from the list.
		await page.waitForSelector('input[data-select="a-2"]');
		await page.check('input[data-select="a-2"]');
		await page.click('[data-action="cancel-selected"]');
		await dialog.waitFor({ state: "visible" });
		assert.match(
			await dialog.locator('[data-field="confirm-text"]').textContent(),
			/^Cancel 1 selected retry of t8-act\? This cannot be undone\./,
		);
		await dialog.locator('[data-action="confirm"]').click();
		await waitOnPage(page, "the cancel to answer", () =>
			/1 changed/.test(document.querySelector('[data-field="action_progress"]')?.textContent ?? ""),
		);
		assert.equal((await get("a-2")).status, "CANCELLED");
		await page.waitForSelector('tr[data-transaction="a-2"]', { state: "detached" });
		// Listings of other statuses offer no action.
		await page.selectOption("#rt-status", "DEAD");
		await page.click('form[data-form="retries-filter"] button[type="submit"]');
		await page.waitForSelector('[data-empty="retries"]');
		assert.equal(await page.isVisible('[data-action="run-now"]'), false, "no action on dead retries");
		await page.close_();
	});

	test("pause through the page stops delivery; resume delivers", async () => {
		const service = "t2-pause";
		await admin.enqueue({ service, transactionId: "seed", delayMs: 3600_000 });
		const page = await open(ADMIN);
		await go(page, `#/services/${service}`);
		await page.click('[data-action="pause"]');
		await page.waitForSelector('[data-field="paused"][data-value="true"]');
		assert.equal((await serviceInfo(service)).paused, true, "GetService says paused");

		const got = [];
		const ex = startExecutor(service, (job) => {
			got.push(job.transactionId);
			return Outcome.success();
		});
		await waitFor("the executor's subscription", async () => (await liveOf(service))?.subscribers >= 1);
		const e = await admin.enqueue({ service, transactionId: "p-1", delayMs: 0 });
		const due = e.dueTime ? e.dueTime.getTime() : Date.now();
		// Three windows (1 s each) past the due time and the retry reads overdue: not delivered.
		await waitFor("three windows past the due time", async () => Date.now() > due + 3000, 15_000);
		await waitFor("p-1 to read as overdue", async () => (await stats()).get(service)?.bands.overdue >= 1);
		assert.deepEqual(got, [], "nothing is delivered while paused");

		await page.click('[data-action="resume"]');
		await page.waitForSelector('[data-field="paused"][data-value="false"]');
		await waitFor("p-1 to be delivered after resume", async () => got.includes("p-1"), 20_000);
		assert.equal((await serviceInfo(service)).paused, false);
		await ex.stop();
		await page.close_();
	});

	test("redrive a selected dead letter through the page; an executor gets it again", async () => {
		const service = "t3-dlq";
		const seen = [];
		const ex = startExecutor(service, (job) => {
			seen.push(job.transactionId);
			// First delivery of each: FAILED, which dead-letters at once; after a redrive: done.
			return seen.filter((t) => t === job.transactionId).length === 1
				? Outcome.fail("card declined: insufficient funds")
				: Outcome.success();
		});
		for (const id of ["d-1", "d-2"]) {
			await admin.enqueue({ service, transactionId: id, delayMs: 0, policy: { maxAttempts: 2 } });
		}
		await waitFor(
			"d-1 and d-2 to be DEAD",
			async () =>
				(await cli("get", service, "d-1")).status === "DEAD" &&
				(await cli("get", service, "d-2")).status === "DEAD",
		);
		const page = await open(ADMIN);
		await go(page, `#/dead-letters/${service}`);
		await page.waitForSelector('tr[data-transaction="d-1"]');
		assert.match(await page.textContent('tr[data-transaction="d-1"]'), /card declined/);

		// A filter that matches nothing shows the empty state.
		await page.fill("#dl-error", "no such error");
		await page.click('[data-form="dead-letter-filter"] button[type="submit"]');
		await page.waitForSelector('[data-empty="dead-letters"]');
		assert.equal(await page.textContent('[data-empty="dead-letters"]'), "No dead letters");
		await page.fill("#dl-error", "card declined");
		await page.click('[data-form="dead-letter-filter"] button[type="submit"]');
		await page.waitForSelector('tr[data-transaction="d-1"]');

		await page.check('input[data-letter="d-1"]');
		await page.click('[data-action="redrive-selected"]');
		await waitOnPage(page, "the redrive's answer", () =>
			/Redriven 1\b/.test(document.querySelector('[data-field="redrive_progress"]')?.textContent ?? ""),
		);
		await waitFor("d-1 delivered again", async () => seen.filter((t) => t === "d-1").length === 2, 20_000);
		await waitFor("d-1 SUCCEEDED", async () => (await cli("get", service, "d-1")).status === "SUCCEEDED");
		assert.equal((await cli("get", service, "d-2")).status, "DEAD", "the unselected letter stays dead");
		// The redriven letter is no longer listed; d-2 still is.
		await page.waitForSelector('tr[data-transaction="d-2"]');
		assert.equal(await page.$('tr[data-transaction="d-1"]'), null);
		await ex.stop();
		await page.close_();
	});

	test("a non-admin token sees no admin page or action; a forged admin call is refused", async () => {
		const user = await Client.connect(GRPC, { token: USER });
		await user.enqueue({ service: USER_SERVICE, transactionId: "u-1", delayMs: 3600_000, payload: "hello" });
		user.close?.();
		const page = await open(null);
		await page.goto(`${URL_}/#/`);
		// No token yet: the sign-in form.
		await page.waitForSelector('form[data-form="token"]');
		await page.fill("#token", USER);
		await page.click('form[data-form="token"] button[type="submit"]');
		await page.waitForSelector("#nav a");
		assert.equal(await page.textContent('[data-field="credential"]'), "ui-shop");

		const navs = await page.$$eval("#nav a", (as) => as.map((a) => a.getAttribute("href")));
		assert.deepEqual(navs.sort(), ["#/", "#/retry", "#/ring"].sort(), "only the non-admin pages in the nav");
		const day = new Date().toISOString().slice(0, 10);
		for (const hash of [
			"#/",
			`#/services/${USER_SERVICE}`,
			"#/services",
			`#/dead-letters/${USER_SERVICE}`,
			"#/retry",
			`#/retry/${USER_SERVICE}/u-1`,
			"#/ring",
			"#/window",
			`#/window/${day}/0`,
		]) {
			await go(page, hash);
			await page.waitForSelector("main h1");
			const found = await page.evaluate(() => {
				const bad = [];
				const sel =
					'[data-action="pause"],[data-action="resume"],[data-action="purge"],[data-action="redrive-selected"],' +
					'[data-action="redrive-all"],[data-action="purge-dead-letters"],form[data-form="policy"],form[data-form="limits"],' +
					'[data-action="clear-push-target"],form[data-form="push"],[data-section="push"]';
				for (const el of document.querySelectorAll(sel)) bad.push(el.outerHTML.slice(0, 80));
				for (const b of document.querySelectorAll("button, a, summary")) {
					if (/pause|resume|purge|redrive|policy|limits|push/i.test(b.textContent)) bad.push(b.textContent);
				}
				return bad;
			});
			assert.deepEqual(found, [], `no admin control on ${hash}`);
		}
		// The retry lookup works for its own service.
		await go(page, `#/retry/${USER_SERVICE}/u-1`);
		await page.waitForSelector('[data-field="status"]');
		assert.equal(await page.textContent('[data-field="status"]'), "SCHEDULED");
		assert.equal(await page.textContent('[data-field="payload"]'), "hello");

		const status = await page.evaluate(
			async ([service, token]) => {
				const r = await fetch(`/api/v1/services/${service}/pause`, {
					method: "POST",
					headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
					body: "{}",
				});
				return r.status;
			},
			[USER_SERVICE, USER],
		);
		assert.equal(status, 403);
		assert.equal((await serviceInfo(USER_SERVICE)).paused, false, "the service stays unpaused");

		await page.click('[data-action="sign-out"]');
		await page.waitForSelector('form[data-form="token"]');
		await page.close_();
	});

	test("a bad policy shows the server's message next to the form and changes nothing", async () => {
		const service = "t5-policy";
		await admin.enqueue({ service, transactionId: "seed", delayMs: 3600_000 });
		const beforeInfo = await serviceInfo(service);
		const page = await open(ADMIN);
		await go(page, `#/services/${service}`);
		await page.waitForSelector('form[data-form="policy"]', { state: "attached" });
		await page.click('details.edit:has(form[data-form="policy"]) summary');
		await page.fill("#policy-multiplier", "0.5");
		await page.click('form[data-form="policy"] button[type="submit"]');
		const alert = page.locator('form[data-form="policy"] [role="alert"]');
		await alert.waitFor({ state: "visible" });
		const text = await alert.textContent();
		// The same request from the page's context: the message shown is the server's.
		const server = await page.evaluate(
			async ([service, token]) => {
				const r = await fetch(`/api/v1/services/${service}/policy`, {
					method: "POST",
					headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
					body: JSON.stringify({ policy: { multiplier: 0.5 } }),
				});
				return { status: r.status, body: await r.json() };
			},
			[service, ADMIN],
		);
		assert.equal(server.status, 400);
		assert.match(server.body.message, /multiplier/);
		assert.ok(
			text.includes(server.body.message),
			`the alert ${JSON.stringify(text)} shows the server's message`,
		);
		assert.deepEqual(await serviceInfo(service), beforeInfo, "nothing changed");

		// A good value is stored and shown.
		await page.fill("#policy-multiplier", "3");
		await page.click('form[data-form="policy"] button[type="submit"]');
		await page.waitForFunction(
			() => document.querySelector('[data-field="policy.multiplier"]')?.textContent === "3",
		);
		assert.equal(await alert.isVisible(), false, "the error is gone");
		assert.equal((await serviceInfo(service)).policy.multiplier, 3);
		await page.close_();
	});

	test("retry lookup: the form, the trace link, a readable not-found", async () => {
		const trace = "4bf92f3577b34da6a3ce929d0e0e4736";
		await admin.enqueue({
			service: "t1-alpha",
			transactionId: "traced/1",
			delayMs: 3600_000,
			payload: "täst",
			attributes: { step: "charge" },
			traceparent: `00-${trace}-00f067aa0ba902b7-01`,
		});
		const page = await open(ADMIN);
		await go(page, "#/retry");
		await page.fill("#retry-service", "t1-alpha");
		await page.fill("#retry-id", "traced/1");
		await page.click('form[data-form="retry"] button[type="submit"]');
		await page.waitForSelector('[data-field="status"]');
		assert.equal(page.url(), `${URL_}/#/retry/t1-alpha/traced%2F1`);
		const want = await cli("get", "t1-alpha", "traced/1");
		assert.equal(await page.textContent('[data-field="status"]'), want.status);
		assert.equal(await page.textContent('[data-field="attempt"]'), String(want.attempt));
		assert.equal(await page.textContent('[data-field="payload"]'), "täst");
		const link = await page.$eval('a[data-field="trace"]', (a) => [a.textContent, a.href, a.target, a.rel]);
		assert.equal(link[0], trace);
		assert.equal(link[1], `http://127.0.0.1:16686/trace/${trace}`);
		assert.equal(link[2], "_blank");
		assert.match(link[3], /noopener/);
		const due = await page.$eval("[data-retry] time", (t) => [t.dateTime, t.title]);
		assert.equal(new Date(due[0]).getTime(), new Date(want.due_time).getTime());

		await go(page, "#/retry/t1-alpha/no-such-id");
		const alert = page.locator('[data-page="retry"] [role="alert"]');
		await alert.waitFor({ state: "visible" });
		assert.match(await alert.textContent(), /No retry no-such-id in service t1-alpha/);
		await page.close_();
	});

	test("layout: no horizontal overflow at 390 and 1280 px; Tab reaches the nav with a visible focus", async () => {
		const day = new Date().toISOString().slice(0, 10);
		const pages = [
			"#/",
			"#/services/t1-alpha",
			"#/dead-letters/t3-dlq",
			"#/retry/t1-alpha/hour-0",
			"#/ring",
			`#/window/${day}/0`,
		];
		for (const width of [390, 1280]) {
			const page = await open(ADMIN, width, 800);
			for (const hash of pages) {
				await go(page, hash);
				await page.waitForSelector("main h1");
				await page.waitForFunction(() => !document.querySelector("main")?.textContent.includes("Loading…"));
				const [sw, iw] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
				assert.ok(sw <= iw, `${hash} at ${width} px: scrollWidth ${sw} > innerWidth ${iw}`);
			}
			// A fresh load, as a keyboard user arrives: focus starts at the top of the document.
			await go(page, "#/");
			await page.reload();
			await page.waitForSelector("#nav a");
			let focus = null;
			for (let i = 0; i < 12 && !focus; i++) {
				await page.keyboard.press("Tab");
				focus = await page.evaluate(() => {
					const a = document.activeElement;
					if (!a?.closest("#nav")) return null;
					const s = getComputedStyle(a);
					return { href: a.getAttribute("href"), outline: s.outlineStyle, width: s.outlineWidth };
				});
			}
			assert.ok(focus, `Tab reaches a nav link at ${width} px`);
			assert.notEqual(focus.outline, "none", `the focused nav link has an outline at ${width} px`);
			assert.notEqual(focus.width, "0px");
			await page.close_();
		}
	});

	test("purge through the page: the typed confirmation, progress; only that service's retries are cancelled", async () => {
		const service = "t8-purge";
		const other = "t8-other";
		const ids = ["a-1", "a-2", "a-3", "a-4", "a-5"];
		const delays = [60_000, 30 * 60_000, 5 * 3600_000, 3 * DAY_MS, 3 * DAY_MS];
		for (const [i, id] of ids.entries())
			await admin.enqueue({ service, transactionId: id, delayMs: delays[i] });
		for (const id of ["o-1", "o-2", "o-3"])
			await admin.enqueue({ service: other, transactionId: id, delayMs: 30 * 60_000 });
		const statuses = async (svc, list) =>
			Promise.all(list.map(async (id) => (await cli("get", svc, id)).status));
		const otherBefore = (await stats()).get(other);
		assert.equal(otherBefore.pending, 3);

		const page = await open(ADMIN);
		await go(page, `#/services/${service}`);
		await page.waitForSelector('[data-action="purge"]');
		// Every text the progress line shows, in order.
		await page.evaluate(() => {
			window.progressTexts = [];
			const el = document.querySelector('[data-field="purge_progress"]');
			new MutationObserver(() => window.progressTexts.push(el.textContent)).observe(el, {
				childList: true,
				characterData: true,
				subtree: true,
			});
		});

		// The dialog: confirm stays disabled until the name is typed; Cancel changes nothing.
		await page.click('[data-action="purge"]');
		const dialog = page.locator("dialog.confirm");
		await dialog.waitFor({ state: "visible" });
		const confirm = dialog.locator('[data-action="confirm"]');
		assert.equal(await confirm.isDisabled(), true, "confirm is disabled before the name is typed");
		await page.fill("#confirm-name", `${service}x`);
		assert.equal(await confirm.isDisabled(), true, "a wrong name keeps confirm disabled");
		await page.press("#confirm-name", "Enter");
		assert.equal(await dialog.isVisible(), true, "Enter with a wrong name does not confirm");
		await dialog.locator('[data-action="cancel"]').click();
		await dialog.waitFor({ state: "detached" });
		assert.equal(await page.textContent('[data-field="purge_progress"]'), "", "no purge ran");
		assert.deepEqual(
			await statuses(service, ids),
			ids.map(() => "SCHEDULED"),
			"cancel changes nothing",
		);
		assert.equal((await stats()).get(service).pending, ids.length);

		// Typing the name enables confirm; the purge runs to done.
		await page.click('[data-action="purge"]');
		await dialog.waitFor({ state: "visible" });
		await page.fill("#confirm-name", service);
		assert.equal(await confirm.isDisabled(), false, "the typed name enables confirm");
		await confirm.click();
		await dialog.waitFor({ state: "detached" });
		await waitOnPage(page, "the purge to finish", () =>
			/^Done\b/.test(document.querySelector('[data-field="purge_progress"]')?.textContent ?? ""),
		);
		const done = await page.textContent('[data-field="purge_progress"]');
		assert.match(done, new RegExp(`^Done ${ids.length} cancelled, \\d+ buckets deleted`));
		const texts = await page.evaluate(() => window.progressTexts);
		assert.ok(
			texts.length >= 1 && texts.every((t) => /^(Purging…|Done) \d+ cancelled/.test(t)),
			texts.join(" | "),
		);
		assert.equal(await page.locator('[data-field="purge_progress"] ~ [role="alert"]').isVisible(), false);

		assert.deepEqual(
			await statuses(service, ids),
			ids.map(() => "CANCELLED"),
			"every pending retry is cancelled",
		);
		assert.equal((await stats()).get(service)?.pending ?? 0, 0);
		assert.deepEqual(await statuses(other, ["o-1", "o-2", "o-3"]), ["SCHEDULED", "SCHEDULED", "SCHEDULED"]);
		const otherAfter = (await stats()).get(other);
		assert.equal(otherAfter.pending, otherBefore.pending, "the other service's pending count is unchanged");
		assert.deepEqual(otherAfter.bands, otherBefore.bands, "the other service's bands are unchanged");
		await page.close_();
	});

	test("limits form: a bad value shows the server's message and changes nothing; a good one is saved", async () => {
		const service = "t9-limits";
		await admin.enqueue({ service, transactionId: "seed", delayMs: 3600_000 });
		const beforeInfo = await serviceInfo(service);
		const page = await open(ADMIN);
		await go(page, `#/services/${service}`);
		await page.waitForSelector('form[data-form="limits"]', { state: "attached" });
		await page.click('details.edit:has(form[data-form="limits"]) summary');
		await page.fill("#limits-max_dispatch_per_second", "0");
		await page.click('form[data-form="limits"] button[type="submit"]');
		const alert = page.locator('form[data-form="limits"] [role="alert"]');
		await alert.waitFor({ state: "visible" });
		const text = await alert.textContent();
		const server = await page.evaluate(
			async ([service, token]) => {
				const r = await fetch(`/api/v1/services/${service}/limits`, {
					method: "POST",
					headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
					body: JSON.stringify({
						limits: { max_dispatch_per_second: 0, dispatch_burst: null, max_concurrent: null },
					}),
				});
				return { status: r.status, body: await r.json() };
			},
			[service, ADMIN],
		);
		assert.equal(server.status, 400);
		assert.match(server.body.message, /max_dispatch_per_second/);
		assert.ok(
			text.includes(server.body.message),
			`the alert ${JSON.stringify(text)} shows the server's message`,
		);
		assert.deepEqual(await serviceInfo(service), beforeInfo, "nothing changed");

		await page.fill("#limits-max_dispatch_per_second", "50");
		await page.fill("#limits-dispatch_burst", "10");
		await page.fill("#limits-max_concurrent", "8");
		await page.click('form[data-form="limits"] button[type="submit"]');
		await waitOnPage(
			page,
			"the saved limits on the page",
			() => document.querySelector('[data-field="limits.max_dispatch_per_second"]')?.textContent === "50",
		);
		assert.equal(await alert.isVisible(), false, "the error is gone");
		assert.equal(await page.textContent('[data-field="limits.dispatch_burst"]'), "10");
		assert.equal(await page.textContent('[data-field="limits.max_concurrent"]'), "8");
		const limits = (await serviceInfo(service)).limits;
		assert.equal(limits.max_dispatch_per_second, 50);
		assert.equal(limits.dispatch_burst, 10);
		assert.equal(limits.max_concurrent, 8);
		await page.close_();
	});

	test("push target: set through the page and shown with its secrets and header values masked; a bad URL is refused naming the field; clear", async () => {
		const service = "t13-push";
		// Standard Webhooks secrets (whsec_ and the base64 of 24 and 32 bytes).
		const secret1 = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
		const secret2 = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
		// Due in an hour: nothing is pushed while the test runs.
		await admin.enqueue({ service, transactionId: "seed", delayMs: 3600_000 });
		const page = await open(ADMIN);
		await go(page, `#/services/${service}`);
		await page.waitForSelector('[data-field="push.none"]');
		assert.match(await page.textContent('[data-field="push.none"]'), /Subscribe streams/);
		assert.equal(await page.isVisible('[data-action="clear-push-target"]'), false, "nothing to clear");
		await page.click('details.edit:has(form[data-form="push"]) summary');

		// A URL without a scheme: the server's message, naming target.url, next to the form.
		await page.fill("#push-url", "hooks.example.com/rebound");
		await page.fill("#push-secret", secret1);
		await page.click('form[data-form="push"] button[type="submit"]');
		const alert = page.locator('form[data-form="push"] [role="alert"]');
		await alert.waitFor({ state: "visible" });
		const text = await alert.textContent();
		const server = await page.evaluate(
			async ([service, token, secret]) => {
				const r = await fetch(`/api/v1/services/${service}/push-target`, {
					method: "POST",
					headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
					body: JSON.stringify({ target: { url: "hooks.example.com/rebound", signing_secrets: [secret] } }),
				});
				return { status: r.status, body: await r.json() };
			},
			[service, ADMIN, secret1],
		);
		assert.equal(server.status, 400);
		assert.equal(server.body.code, "INVALID_ARGUMENT");
		assert.match(server.body.message, /^target\.url: /);
		assert.ok(
			text.includes(server.body.message),
			`the alert ${JSON.stringify(text)} shows the server's message`,
		);
		assert.equal((await serviceInfo(service)).push_target, null, "nothing stored");
		assert.equal(await page.isVisible('[data-field="push.none"]'), true);

		// A good target: headers as lines (one with markup, shown as text), two secrets.
		await page.fill("#push-url", "HTTPS://Hooks.Example.com/rebound?tenant=7");
		await page.fill("#push-timeout", "2.5");
		await page.fill("#push-max_concurrent", "8");
		await page.fill("#push-headers", "X-Team: payments\nX-Note: <b>bold</b> & co");
		await page.fill("#push-next_secret", secret2);
		await page.click('form[data-form="push"] button[type="submit"]');
		await waitOnPage(
			page,
			"the saved push target on the page",
			() =>
				document.querySelector('[data-field="push.url"]')?.textContent ===
				"https://hooks.example.com/rebound?tenant=7",
		);
		assert.equal(await alert.isVisible(), false, "the error is gone");
		const shown = await page.evaluate(() => {
			const q = (f) => document.querySelector(`[data-field="${f}"]`);
			const lines = (f) => [...q(f).children].map((e) => e.textContent);
			return {
				timeout: q("push.timeout").textContent,
				headers: lines("push.headers"),
				secrets: lines("push.signing_secrets"),
				maxConcurrent: q("push.max_concurrent").textContent,
				updated: q("push.updated_at").querySelector("time")?.dateTime,
				markup: document.querySelectorAll('[data-section="push"] b').length,
				secretInputs: [...document.querySelectorAll('form[data-form="push"] input[type="password"]')].map(
					(i) => i.value,
				),
				page: document.body.innerText,
			};
		});
		assert.equal(shown.timeout, "2.5s");
		assert.deepEqual(shown.headers, ["X-Note: …& co", "X-Team: …"], "the header values are masked");
		assert.equal(shown.markup, 0, "header text is not markup");
		assert.deepEqual(shown.secrets, ["whsec_…LaSw", "whsec_…Hh8="], "the secrets are masked");
		assert.match(shown.maxConcurrent, /^8\b/);
		assert.match(shown.updated ?? "", /Z$/);
		assert.deepEqual(shown.secretInputs, ["", ""], "the secret inputs are emptied");
		for (const secret of [secret1, secret2]) {
			assert.ok(!shown.page.includes(secret.slice(6, -4)), "no secret on the page");
		}
		assert.ok(!shown.page.includes("<b>bold</b>"), "no header value on the page");
		const got = (await cli("push-target", "get", service)).push_target;
		assert.equal(got.url, "https://hooks.example.com/rebound?tenant=7");
		assert.equal(got.timeout, 2.5);
		assert.equal(got.max_concurrent, 8);
		assert.deepEqual(got.headers, { "X-Team": "…", "X-Note": "…& co" });
		assert.deepEqual(got.signing_secrets, ["whsec_…LaSw", "whsec_…Hh8="]);
		// The form holds the target for a replacement, without its secrets.
		assert.equal(await page.inputValue("#push-url"), "https://hooks.example.com/rebound?tenant=7");
		assert.equal(await page.inputValue("#push-headers"), "X-Note: …& co\nX-Team: …");
		assert.equal(
			await page.textContent('details.edit:has(form[data-form="push"]) summary'),
			"Replace push target",
		);
		// Saved again with the headers as filled in (masked): refused, naming the header.
		await page.fill("#push-secret", secret1);
		await page.click('form[data-form="push"] button[type="submit"]');
		await page.waitForFunction(() =>
			document.querySelector('form[data-form="push"] [role="alert"]')?.textContent.includes("masked value"),
		);
		assert.match(await alert.textContent(), /target\.headers\["X-Note"\]: is a masked value/);
		assert.deepEqual(
			(await cli("push-target", "get", service)).push_target.headers,
			got.headers,
			"the stored target stays",
		);

		// A fresh load shows it from GetService; at 390 px nothing overflows.
		await page.setViewportSize({ width: 390, height: 844 });
		await go(page, "#/");
		await go(page, `#/services/${service}`);
		await page.waitForSelector('[data-field="push.url"]');
		await page.click('details.edit:has(form[data-form="push"]) summary');
		await page.waitForSelector("#push-headers");
		const [sw, iw] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
		assert.ok(sw <= iw, `the push panel at 390 px: scrollWidth ${sw} > innerWidth ${iw}`);
		await page.setViewportSize({ width: 1280, height: 900 });
		await page.locator('[data-section="push"]').screenshot({ path: join(SHOTS, "service-push.png") });

		// Clear, behind the typed confirmation.
		await page.click('[data-action="clear-push-target"]');
		const dialog = page.locator("dialog.confirm");
		await dialog.waitFor({ state: "visible" });
		await page.fill("#confirm-name", service);
		await dialog.locator('[data-action="confirm"]').click();
		await dialog.waitFor({ state: "detached" });
		await page.waitForSelector('[data-field="push.none"]');
		assert.equal(await page.isVisible('[data-action="clear-push-target"]'), false);
		assert.equal((await serviceInfo(service)).push_target, null, "GetService has no push target");
		await page.close_();
	});

	/** `n` dead letters in `service` (ids `${prefix}-000`...), failed by an executor that then acks redeliveries. */
	async function deadLetters(service, prefix, n) {
		const seen = new Map();
		const ex = startExecutor(service, (job) => {
			const k = (seen.get(job.transactionId) ?? 0) + 1;
			seen.set(job.transactionId, k);
			return k === 1 ? Outcome.fail(`boom ${job.transactionId}`) : Outcome.success();
		});
		const ids = Array.from({ length: n }, (_, i) => `${prefix}-${String(i).padStart(3, "0")}`);
		for (let i = 0; i < ids.length; i += 50) {
			const items = ids.slice(i, i + 50).map((id) => ({ service, transactionId: id, delayMs: 0 }));
			for (const r of await admin.enqueueBatch(items)) assert.ok(!(r instanceof Error), r.message);
		}
		await waitFor(
			`${n} dead letters in ${service}`,
			async () => (await stats()).get(service)?.dead_lettered === n,
			30_000,
			250,
		);
		return { ex, ids, seen };
	}

	test("redrive all matching through the page, with progress: every letter is delivered again", async () => {
		const service = "t10-redrive-all";
		const { ex, ids, seen } = await deadLetters(service, "r", 12);
		const page = await open(ADMIN);
		await go(page, `#/dead-letters/${service}`);
		await page.waitForSelector(`tr[data-transaction="${ids[0]}"]`);
		assert.equal(await page.locator("tr[data-transaction]").count(), ids.length);
		await page.evaluate(() => {
			window.progressTexts = [];
			const el = document.querySelector('[data-field="redrive_progress"]');
			new MutationObserver(() => window.progressTexts.push(el.textContent)).observe(el, {
				childList: true,
				characterData: true,
				subtree: true,
			});
		});
		await page.click('[data-action="redrive-all"]');
		await waitOnPage(page, "the redrive to finish", () =>
			/^Done:/.test(document.querySelector('[data-field="redrive_progress"]')?.textContent ?? ""),
		);
		assert.equal(
			await page.textContent('[data-field="redrive_progress"]'),
			`Done: ${ids.length} redriven, 0 skipped.`,
		);
		const texts = await page.evaluate(() => window.progressTexts);
		assert.equal(texts[0], "Redriving…", `progress shown while it runs: ${texts.join(" | ")}`);
		await waitFor("every letter delivered again", async () => ids.every((id) => seen.get(id) === 2), 20_000);
		await waitFor("every retry SUCCEEDED", async () => {
			for (const id of ids) if ((await cli("get", service, id)).status !== "SUCCEEDED") return false;
			return true;
		});
		// Redriven letters are no longer listed.
		await page.waitForSelector('[data-empty="dead-letters"]');
		await ex.stop();
		await page.close_();
	});

	test("dead letters page through: the next page shows the rest, no duplicates", async () => {
		const service = "t11-paging";
		const n = 130; // the page asks for 100 a page
		const { ex, ids } = await deadLetters(service, "p", n);
		await ex.stop();
		const page = await open(ADMIN);
		await go(page, `#/dead-letters/${service}`);
		await page.waitForSelector("tr[data-transaction]");
		const rows = () => page.$$eval("tr[data-transaction]", (trs) => trs.map((tr) => tr.dataset.transaction));
		const first = await rows();
		assert.equal(first.length, 100, "the first page has 100 letters");
		await page.click('[data-action="next-page"]');
		await waitOnPage(
			page,
			"the second page",
			() => document.querySelectorAll("tr[data-transaction]").length === 30,
		);
		const second = await rows();
		assert.equal(await page.$('[data-action="next-page"]'), null, "no next page after the last");
		const all = [...first, ...second];
		assert.equal(new Set(all).size, all.length, "no letter on both pages");
		assert.deepEqual([...all].sort(), [...ids].sort(), "both pages together are every letter");
		// Back to the first page: the same letters as before.
		await page.click('button:has-text("Previous page")');
		await waitOnPage(
			page,
			"the first page again",
			() => document.querySelectorAll("tr[data-transaction]").length === 100,
		);
		assert.deepEqual(await rows(), first);
		await page.close_();
	});

	test("screenshots of every page", async () => {
		const t1 = await cli("get", "t1-alpha", "hour-0");
		const loc = t1.location;
		const page = await open(ADMIN, 1280, 900);
		// A steady workload for the live charts: a few retries a second, due at once, acked by an
		// executor, for at least 15 s (the page polls every 3 s: each poll after the first adds a point).
		const steady = "t12-steady";
		const ex = startExecutor(steady, () => Outcome.success());
		await waitFor("the steady executor's subscription", async () => (await liveOf(steady))?.subscribers >= 1);
		await go(page, "#/");
		let stop = false;
		const started = Date.now();
		// Bounded (90 s) and stopping on the first error, should the test fail before it stops it.
		const workload = (async () => {
			for (let i = 0; !stop && Date.now() - started < 90_000; i++) {
				await admin.enqueue({ service: steady, transactionId: `steady-${i}`, delayMs: 0 });
				await new Promise((r) => setTimeout(r, 250));
			}
		})().catch((e) => e);
		await waitFor(
			"15 s of workload and points on every live chart",
			async () => {
				if (Date.now() - started < 15_000) return false;
				return page.evaluate(() => {
					const points = (key) =>
						(document.querySelector(`[data-chart="${key}"] polyline`)?.getAttribute("points") ?? "")
							.split(" ")
							.filter(Boolean).length;
					const value = (field) => document.querySelector(`[data-field="${field}"]`)?.dataset.value ?? "";
					return (
						["enqueued", "delivered", "acked", "lateness"].every((k) => points(k) >= 3) &&
						Number(value("delivery_rate")) > 0 &&
						Number(value("ack_rate")) > 0 &&
						value("lateness_mean") !== ""
					);
				});
			},
			60_000,
			250,
		);
		// The backlog table is read on open and on Refresh: refresh it so the steady service is listed.
		await page.click('[data-action="refresh"]');
		await page.waitForSelector(`tr[data-service="${steady}"]`);
		const shots = [
			["overview", "#/", 'tr[data-service="t1-alpha"]'],
			["service", "#/services/t5-policy", '[data-field="policy.multiplier"]'],
			["dead-letters", "#/dead-letters/t3-dlq", 'tr[data-transaction="d-2"]'],
			["retry", "#/retry/t1-alpha/hour-0", '[data-field="status"]'],
			["ring", "#/ring", "tr[data-node]"],
			["window", `#/window/${loc.day}/${loc.window}`, "tr[data-instance]"],
		];
		for (const [name, hash, ready] of shots) {
			if (name !== "overview") await go(page, hash);
			await page.waitForSelector(ready);
			await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
			if (name === "overview") {
				stop = true;
				const err = await workload;
				assert.ok(!(err instanceof Error), `the workload's enqueues: ${err?.message}`);
				await ex.stop();
			}
		}
		await page.close_();
		const narrow = await open(ADMIN, 390, 844);
		await go(narrow, "#/");
		await narrow.waitForSelector('tr[data-service="t1-alpha"]');
		await narrow.screenshot({ path: join(SHOTS, "overview-390.png"), fullPage: true });
		await narrow.close_();
		if (process.env.REBOUND_UI_DOCS_SCREENSHOT) {
			copyFileSync(join(SHOTS, "overview.png"), process.env.REBOUND_UI_DOCS_SCREENSHOT);
		}
	});
});
