// What the dashboard costs the node it is served by: the node process's CPU time (utime + stime
// from /proc/<pid>/stat) over three phases of MEASURE_S seconds each — no browser, the overview
// page open in headless Chromium (it polls /api/v1/live every 3 s), the ring page open — and the
// bytes the page transfers (response bodies seen by playwright) on first load and per minute.
// Not a test: run it with `scripts/test-ui --cost`, which starts the node and sets
//   REBOUND_UI_URL, REBOUND_UI_GRPC, REBOUND_UI_ADMIN_TOKEN, REBOUND_UI_NODE_PID, REBOUND_SDK,
//   REBOUND_CHROMIUM (and REBOUND_COST_SECONDS, default 60, for a shorter run).
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { env, launchChromium } from "./browser.mjs";

const URL_ = env("REBOUND_UI_URL");
const GRPC = env("REBOUND_UI_GRPC");
const ADMIN = env("REBOUND_UI_ADMIN_TOKEN");
const PID = Number(env("REBOUND_UI_NODE_PID"));
const MEASURE_S = Number(process.env.REBOUND_COST_SECONDS || 60);
const TICK = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());
const { Client } = await import(env("REBOUND_SDK"));

/** The node's CPU time so far (user + system), in ms. */
function cpuMs() {
	const stat = readFileSync(`/proc/${PID}/stat`, "utf8");
	// Fields after the command name (which is in parentheses and may hold spaces): state is field 3.
	const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
	const utime = Number(f[14 - 3]);
	const stime = Number(f[15 - 3]);
	return ((utime + stime) * 1000) / TICK;
}

/** Measures MEASURE_S s of what is going on now: the node's CPU ms and the page's bytes. */
async function phase(name, counter) {
	const c0 = cpuMs();
	const t0 = performance.now();
	const b0 = counter.bytes;
	await new Promise((r) => setTimeout(r, MEASURE_S * 1000));
	const ms = performance.now() - t0;
	const cpu = cpuMs() - c0;
	const bytes = counter.bytes - b0;
	return { name, ms, cpu, bytes };
}

const fmt = (n, d = 0) => n.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });

// Something to show: three services with a few retries each, due in an hour (not measured).
const admin = await Client.connect(GRPC, { token: ADMIN });
for (const service of ["cost-a", "cost-b", "cost-c"])
	for (let i = 0; i < 5; i++) await admin.enqueue({ service, transactionId: `c-${i}`, delayMs: 3600_000 });
admin.close?.();

console.log(`node pid ${PID}, CLK_TCK ${TICK}, ${MEASURE_S} s a phase`);
const results = [];
const counter = { bytes: 0, on: false, firstLoad: [] };
results.push(await phase("idle (no browser)", counter));

const browser = await launchChromium();
try {
	const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
	await context.addInitScript((t) => sessionStorage.setItem("rebound.token", t), ADMIN);
	const page = await context.newPage();
	const origin = new URL(URL_).origin;
	let loading = true;
	// The API calls a load and a poll make, and the bytes of their response bodies.
	page.on("response", async (r) => {
		if (!r.url().startsWith(origin)) return;
		const first = loading;
		let n = 0;
		try {
			n = (await r.body()).length;
		} catch {
			// a body that is gone (navigation) counts as 0
		}
		counter.bytes += n;
		if (first) counter.firstLoad.push([new URL(r.url()).pathname + new URL(r.url()).search, r.status(), n]);
	});
	// First load: the document, its assets, the session, the stats and the first live poll.
	const c0 = cpuMs();
	await page.goto(`${URL_}/#/`);
	await page.waitForSelector('tr[data-service="cost-a"]');
	await page.waitForFunction(() => document.querySelector('[data-field="live_at"]')?.textContent !== "–");
	await page.waitForLoadState("networkidle");
	loading = false;
	const firstLoadCpu = cpuMs() - c0;
	results.push(await phase("overview open (polls live every 3 s)", counter));
	await page.evaluate(() => (location.hash = "#/ring"));
	await page.waitForSelector("tr[data-node]");
	results.push(await phase("ring page open", counter));

	console.log("");
	console.log(
		"phase                                   wall s   CPU ms   CPU ms/min   % of one core   bytes/min",
	);
	for (const r of results) {
		console.log(
			`${r.name.padEnd(38)} ${fmt(r.ms / 1000, 1).padStart(7)} ${fmt(r.cpu).padStart(8)} ${fmt((r.cpu * 60_000) / r.ms).padStart(12)} ${fmt((r.cpu / r.ms) * 100, 2).padStart(15)} ${(r.name.startsWith("idle") ? "–" : fmt((r.bytes * 60_000) / r.ms)).padStart(11)}`,
		);
	}
	console.log("");
	const total = counter.firstLoad.reduce((a, [, , n]) => a + n, 0);
	console.log(`first load: ${fmt(total)} bytes of response bodies, node CPU ${fmt(firstLoadCpu)} ms`);
	for (const [path, status, n] of counter.firstLoad)
		console.log(`  ${String(status).padEnd(4)} ${path.padEnd(40)} ${fmt(n).padStart(9)} bytes`);
	await context.close();
} finally {
	await browser.close();
}
