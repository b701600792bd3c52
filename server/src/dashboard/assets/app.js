// The Rebound dashboard: plain DOM, no framework, no build step. Every value from the server
// goes into the page through textContent or setAttribute, never through innerHTML.

const TOKEN_KEY = "rebound.token";
const LIVE_EVERY_MS = 3000;
const LIVE_POINTS = 60;

// ---- DOM helpers ------------------------------------------------------------------------------

/** h("a", {href: "#/"}, "text", child, ...): an element; null/false children are skipped. */
function h(tag, attrs = {}, ...children) {
	const svg = tag.startsWith("svg:");
	const el = svg
		? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
		: document.createElement(tag);
	for (const [k, v] of Object.entries(attrs ?? {})) {
		if (v === null || v === undefined || v === false) continue;
		if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
		else if (k === "class") el.setAttribute("class", v);
		else if (k === "value" || k === "checked" || k === "disabled") el[k] = v;
		else el.setAttribute(k, v === true ? "" : String(v));
	}
	append(el, children);
	return el;
}

function append(el, ...children) {
	for (const c of children.flat(Infinity)) {
		if (c === null || c === undefined || c === false) continue;
		el.append(c instanceof Node ? c : document.createTextNode(String(c)));
	}
	return el;
}

function clear(el, ...children) {
	el.replaceChildren();
	return append(el, children);
}

const $ = (sel, root = document) => root.querySelector(sel);

/** A table, stacked into cards on narrow screens; a column name starting with # is numeric. */
function table(cols, rows, cls = "") {
	const name = (c) => (typeof c === "string" ? c.replace(/^#/, "") : "");
	const numeric = (c) => typeof c === "string" && c[0] === "#";
	const head = cols.map((c) =>
		h("th", { scope: "col", class: numeric(c) && "n" }, typeof c === "string" ? name(c) : c),
	);
	const t = h("table", { class: `stack ${cls}` }, h("thead", {}, h("tr", {}, head)), h("tbody", {}, rows));
	for (const tr of t.tBodies[0].rows) {
		[...tr.cells].forEach((c, i) => {
			if (name(cols[i] ?? "")) c.dataset.label = name(cols[i]);
			if (numeric(cols[i])) c.classList.add("n");
		});
	}
	return h("div", { class: "table-wrap" }, t);
}

/** A cell with data-field (and data-value, the raw figure, for tests and tools). */
function td(field, value, raw) {
	return h("td", { "data-field": field, "data-value": raw }, value);
}

/** The placeholder a section shows until its first answer (or error) arrives. */
function loading() {
	return h("p", { class: "muted loading" }, "Loading…");
}

/** After a failed first load: the placeholder goes, the error stays. */
function loaded(el) {
	el.querySelector(":scope > .loading")?.remove();
}

function badge(text, kind) {
	return h("span", { class: `badge ${kind}` }, text);
}

/** An inline error area (role=alert) that a section shows its failures in. */
function errorBox() {
	const el = h("p", { class: "error", role: "alert", hidden: true });
	el.show = (e) => {
		el.textContent = e ? errorText(e) : "";
		el.hidden = !e;
	};
	return el;
}

function errorText(e) {
	if (e instanceof ApiError) return e.code ? `${e.message} (${e.code})` : e.message;
	return e?.message ?? String(e);
}

// ---- formatting -------------------------------------------------------------------------------

const dateTimeFmt = new Intl.DateTimeFormat(undefined, {
	year: "numeric",
	month: "short",
	day: "2-digit",
	hour: "2-digit",
	minute: "2-digit",
	second: "2-digit",
});
const timeFmt = new Intl.DateTimeFormat(undefined, {
	hour: "2-digit",
	minute: "2-digit",
	second: "2-digit",
});
const numFmt = new Intl.NumberFormat(undefined);
const rateFmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });

/** A <time> in the viewer's zone, the UTC value in datetime and title; "–" when unset. */
function timeEl(iso, short = false) {
	if (!iso) return h("span", { class: "muted" }, "–");
	const d = new Date(iso);
	if (Number.isNaN(d.getTime())) return h("span", {}, String(iso));
	return h(
		"time",
		{ datetime: d.toISOString(), title: `${d.toISOString()} (UTC)` },
		(short ? timeFmt : dateTimeFmt).format(d),
	);
}

function num(n) {
	return n === null || n === undefined ? "–" : numFmt.format(Number(n));
}

/** Seconds as "1h 2m 3s", "250ms"; "–" when unset. */
function dur(s) {
	if (s === null || s === undefined) return "–";
	s = Number(s);
	if (s < 1) return `${Math.round(s * 1000)}ms`;
	const parts = [];
	const units = [
		["d", 86400],
		["h", 3600],
		["m", 60],
	];
	for (const [u, n] of units) {
		if (s >= n) {
			parts.push(`${Math.floor(s / n)}${u}`);
			s %= n;
		}
	}
	const rest = parts.length ? Math.round(s) : Math.round(s * 1000) / 1000;
	if (rest > 0 || parts.length === 0) parts.push(`${rest}s`);
	return parts.slice(0, 3).join(" ");
}

function yesNo(b) {
	return b === null || b === undefined ? "–" : b ? "yes" : "no";
}

/** datetime-local value (viewer's zone) → RFC 3339 UTC, or null when empty. */
function localToUtc(v) {
	if (!v) return null;
	const d = new Date(v);
	if (Number.isNaN(d.getTime())) throw new Error(`${v} is not a date and time`);
	return d.toISOString();
}

// ---- the API ----------------------------------------------------------------------------------

class ApiError extends Error {
	constructor(status, code, message) {
		super(message);
		this.status = status;
		this.code = code;
	}
}

function token() {
	return sessionStorage.getItem(TOKEN_KEY);
}

async function api(path, body) {
	const headers = { Accept: "application/json" };
	const t = token();
	if (t) headers.Authorization = `Bearer ${t}`;
	const init = { headers, cache: "no-store" };
	if (body !== undefined) {
		init.method = "POST";
		headers["Content-Type"] = "application/json";
		init.body = JSON.stringify(body);
	}
	let res;
	try {
		res = await fetch(`/api/v1/${path}`, init);
	} catch (e) {
		// A write whose connection broke may have been applied: say so, never "nothing written".
		if (body !== undefined)
			throw new ApiError(
				0,
				"DEADLINE_EXCEEDED",
				`no answer from the node (${e.message}): the change may or may not have been made; reload to see, it is safe to repeat`,
			);
		throw new ApiError(0, "UNAVAILABLE", `the node did not answer (${e.message})`);
	}
	const text = await res.text();
	let data = null;
	try {
		data = text ? JSON.parse(text) : null;
	} catch {
		data = null;
	}
	if (!res.ok) {
		const message = data?.message ?? (text.trim() || `HTTP ${res.status}`);
		const err = new ApiError(res.status, data?.code ?? "", message);
		if (res.status === 401 && path !== "session") showSignIn(err);
		throw err;
	}
	return data;
}

const enc = encodeURIComponent;

// ---- session, nav and routing -----------------------------------------------------------------

let session = null;
/** Called when the page is left: stops its timers. */
let leave = () => {};

const NAV = [
	{ href: "#/", label: "Overview", match: /^#?\/?$/ },
	{ href: "#/services", label: "Services", admin: true, match: /^#\/services/ },
	{ href: "#/dead-letters", label: "Dead letters", admin: true, match: /^#\/dead-letters/ },
	{ href: "#/retry", label: "Retry lookup", match: /^#\/retry/ },
	{ href: "#/ring", label: "Ring", match: /^#\/ring/ },
	{ href: "#/window", label: "Window inspector", admin: true, match: /^#\/window/ },
];

function renderNav() {
	const nav = $("#nav");
	const items = NAV.filter((n) => session && (!n.admin || session.admin));
	clear(
		nav,
		h(
			"ul",
			{},
			items.map((n) => h("li", {}, h("a", { href: n.href, "data-nav": n.label }, n.label))),
		),
	);
	markNav();
	const who = $("#who");
	clear(who);
	if (!session) return;
	const name = session.credential ?? (session.auth_required ? "unknown" : "no authentication");
	append(
		who,
		h(
			"span",
			{ class: "muted", title: `node ${session.node_id}, version ${session.version}` },
			`${session.node_id} · `,
			h("span", { "data-field": "credential" }, name),
			session.admin ? " (admin)" : "",
		),
	);
	if (token() || session.auth_required) {
		append(
			who,
			h(
				"button",
				{
					type: "button",
					class: "link",
					"data-action": "sign-out",
					onclick: () => {
						sessionStorage.removeItem(TOKEN_KEY);
						start();
					},
				},
				"Sign out",
			),
		);
	}
}

function markNav() {
	const hash = location.hash || "#/";
	for (const a of document.querySelectorAll("#nav a")) {
		const n = NAV.find((x) => x.href === a.getAttribute("href"));
		if (n?.match.test(hash)) a.setAttribute("aria-current", "page");
		else a.removeAttribute("aria-current");
	}
}

function showSignIn(err) {
	leave();
	leave = () => {};
	session = null;
	renderNav();
	const box = errorBox();
	const input = h("input", {
		id: "token",
		name: "token",
		type: "password",
		autocomplete: "current-password",
		required: true,
		spellcheck: "false",
	});
	const form = h(
		"form",
		{
			class: "card signin",
			"data-form": "token",
			onsubmit: async (ev) => {
				ev.preventDefault();
				sessionStorage.setItem(TOKEN_KEY, input.value.trim());
				try {
					await loadSession();
					route();
				} catch (e) {
					sessionStorage.removeItem(TOKEN_KEY);
					box.show(e.status === 401 ? new Error("That token was not accepted.") : e);
					input.focus();
				}
			},
		},
		h("h1", {}, "Sign in"),
		h("p", {}, "This node requires a credential. Enter a bearer token from its credentials file."),
		h("label", { for: "token" }, "Token"),
		input,
		h("button", { type: "submit" }, "Sign in"),
		box,
	);
	if (err && token()) box.show(new Error(`The stored token was refused: ${err.message}`));
	sessionStorage.removeItem(TOKEN_KEY);
	clear($("#main"), form);
	input.focus();
}

async function loadSession() {
	session = await api("session");
	renderNav();
}

async function start() {
	try {
		await loadSession();
	} catch (e) {
		if (e.status === 401) return showSignIn(e);
		const box = errorBox();
		box.show(e);
		clear(
			$("#main"),
			h("h1", {}, "Rebound"),
			box,
			h("button", { type: "button", onclick: start }, "Try again"),
		);
		return;
	}
	route();
}

function route() {
	if (!session) return;
	leave();
	leave = () => {};
	markNav();
	const parts = (location.hash.replace(/^#\/?/, "") || "").split("/").map((p) => {
		try {
			return decodeURIComponent(p);
		} catch {
			return p; // a malformed escape (#/retry/%) is looked up as typed, not a dead page
		}
	});
	const [page, a, b] = parts;
	const main = $("#main");
	const admin = session.admin;
	let view;
	if (!page) view = overview();
	else if (page === "services" && admin) view = a ? servicePage(a) : servicePicker("services");
	else if (page === "dead-letters" && admin) view = a ? deadLettersPage(a) : servicePicker("dead-letters");
	else if (page === "retry") view = retryPage(a, parts.slice(2).join("/"));
	else if (page === "ring") view = ringPage();
	else if (page === "window" && admin) view = windowPage(a, b);
	else if (["services", "dead-letters", "window"].includes(page))
		view = h(
			"section",
			{},
			h("h1", {}, "Not available"),
			h("p", { class: "empty" }, "This page needs an admin credential."),
		);
	else view = h("section", {}, h("h1", {}, "Not found"), h("p", { class: "empty" }, "No such page."));
	clear(main, view);
}

// ---- overview ---------------------------------------------------------------------------------

const BANDS = [
	["overdue", "Overdue"],
	["within_minute", "≤ 1 min"],
	["within_hour", "≤ 1 h"],
	["within_day", "≤ 1 day"],
	["later", "Later"],
];

function overview() {
	const root = h("div", { class: "page" });
	append(root, h("h1", {}, "Overview"));
	if (session.admin) append(root, statsSection());
	append(root, liveSection());
	return root;
}

function statsSection() {
	const box = errorBox();
	const measured = h("span", { class: "measured", "data-field": "measured_at" }, "–");
	const body = h("div", { class: "stats-body" }, loading());
	const button = h("button", { type: "button", "data-action": "refresh", onclick: load }, "Refresh");
	const section = h(
		"section",
		{ class: "card", "aria-labelledby": "services-h", "aria-busy": "true" },
		h(
			"div",
			{ class: "section-head" },
			h("h2", { id: "services-h" }, "Services"),
			h("span", { class: "muted" }, "Measured at ", measured),
			button,
		),
		box,
		body,
	);
	async function load() {
		section.setAttribute("aria-busy", "true");
		button.disabled = true;
		try {
			const [stats, services] = await Promise.all([api("stats"), api("services")]);
			box.show(null);
			clear(measured, timeEl(new Date().toISOString()));
			clear(body, statsTable(stats, services), nodesSummary(stats.nodes ?? []));
		} catch (e) {
			box.show(e);
			loaded(body);
		} finally {
			button.disabled = false;
			section.setAttribute("aria-busy", "false");
		}
	}
	load();
	return section;
}

function statsTable(stats, services) {
	const infos = new Map((services.services ?? []).map((s) => [s.service, s]));
	const rows = new Map((stats.services ?? []).map((s) => [s.service, s]));
	for (const name of infos.keys()) if (!rows.has(name)) rows.set(name, null);
	if (rows.size === 0) return h("p", { class: "empty" }, "No services yet — enqueue a retry to see it here.");
	const cols = ["Service", "State", "#Pending", ...BANDS.map(([, l]) => `#${l}`)];
	cols.push("#In flight", "#Dead letters", "#Oldest overdue", "Limits", "Windows");
	const body = [...rows.keys()].sort().map((name) => {
		const s = rows.get(name) ?? {};
		const info = infos.get(name);
		const paused = s.paused ?? info?.paused ?? false;
		const cell = (field, raw, text = num(raw)) => td(field, text, raw ?? "");
		return h(
			"tr",
			{ "data-service": name },
			h("th", { scope: "row" }, h("a", { href: `#/services/${enc(name)}` }, name)),
			td("paused", badge(paused ? "paused" : "running", paused ? "warn" : "ok"), String(paused)),
			cell("pending", s.pending),
			BANDS.map(([k]) => cell(k, s.bands?.[k])),
			cell("in_flight", s.in_flight),
			cell(
				"dead_lettered",
				s.dead_lettered,
				h("a", { href: `#/dead-letters/${enc(name)}` }, num(s.dead_lettered)),
			),
			cell("oldest_due_age", s.oldest_due_age, dur(s.oldest_due_age)),
			td("limits", limitsText(info?.limits)),
			td("windows", windowLinks(s.windows ?? [])),
		);
	});
	return table(cols, body, "stats");
}

function windowLinks(windows) {
	if (windows.length === 0) return h("span", { class: "muted" }, "–");
	const list = h(
		"ul",
		{ class: "windows" },
		windows
			.slice(0, 50)
			.map((w) =>
				h(
					"li",
					{},
					h(
						"a",
						{ href: `#/window/${enc(w.day)}/${w.window}`, title: w.window_start ?? "" },
						`${w.day} #${w.window}`,
					),
					`: ${num(w.pending)}`,
				),
			),
	);
	return h(
		"details",
		{},
		h("summary", {}, `${windows.length} window${windows.length === 1 ? "" : "s"}`),
		list,
	);
}

function limitsText(l) {
	if (!l) return "–";
	const parts = [];
	if (l.max_dispatch_per_second != null) parts.push(`${l.max_dispatch_per_second}/s`);
	if (l.dispatch_burst != null) parts.push(`burst ${l.dispatch_burst}`);
	if (l.max_concurrent != null) parts.push(`${l.max_concurrent} concurrent`);
	return parts.length ? parts.join(", ") : "unlimited";
}

function nodesSummary(nodes) {
	if (nodes.length === 0) return null;
	return h(
		"p",
		{ class: "muted nodes-line" },
		`${nodes.length} node${nodes.length === 1 ? "" : "s"}: `,
		nodes.map((n, i) => [i ? ", " : "", `${n.node_id}${n.reachable === false ? " (unreachable)" : ""}`]),
		" — ",
		h("a", { href: "#/ring" }, "ring"),
	);
}

// Live rates from /api/v1/live counter deltas, polled every 3 s while the overview is open.
const CHARTS = [
	{ key: "enqueued", title: "Enqueued / s", field: "enqueue_rate" },
	{ key: "delivered", title: "Delivered / s", field: "delivery_rate" },
	{ key: "acked", title: "Acked / s", field: "ack_rate" },
	{ key: "lateness", title: "Lateness (mean)", field: "lateness_mean", seconds: true },
];
const live = { prev: null, series: Object.fromEntries(CHARTS.map((c) => [c.key, []])), p: {} };

function liveSection() {
	const box = errorBox();
	const charts = CHARTS.map((c) => chart(c));
	const at = h("span", { "data-field": "live_at" }, "–");
	const extra = h("p", { class: "muted lateness-pct" }, "p50 – · p99 –");
	const table = h("div", { class: "live-body" });
	const section = h(
		"section",
		{ class: "card", "aria-labelledby": "live-h" },
		h(
			"div",
			{ class: "section-head" },
			h("h2", { id: "live-h" }, "Live on this node"),
			h("span", { class: "muted" }, `every ${LIVE_EVERY_MS / 1000} s · `, at),
		),
		box,
		h(
			"div",
			{ class: "charts" },
			charts.map((c) => c.el),
		),
		extra,
		table,
	);
	let timer = 0;
	let stopped = false;
	async function poll() {
		try {
			const snap = await api("live");
			box.show(null);
			update(snap);
			clear(at, timeEl(snap.at ?? new Date().toISOString(), true));
			for (const c of charts) c.draw(live.series[c.def.key]);
			const p = live.p;
			extra.textContent = `lateness p50 ${p.p50 == null ? "–" : dur(p.p50)} · p99 ${p.p99 == null ? "–" : dur(p.p99)}`;
			clear(table, liveTable(snap));
		} catch (e) {
			box.show(e);
		}
		if (!stopped) timer = setTimeout(poll, LIVE_EVERY_MS);
	}
	for (const c of charts) c.draw(live.series[c.def.key]);
	poll();
	const prevLeave = leave;
	leave = () => {
		prevLeave();
		stopped = true;
		clearTimeout(timer);
	};
	return section;
}

function sumOf(snap, key) {
	return (snap.services ?? []).reduce((a, s) => a + Number(s[key] ?? 0), 0);
}

function update(snap) {
	const t = snap.at ? Date.parse(snap.at) : Date.now();
	const prev = live.prev;
	live.prev = { t, snap };
	if (!prev || prev.snap.node_id !== snap.node_id) return;
	const dt = (t - prev.t) / 1000;
	if (!(dt > 0)) return;
	const push = (key, v) => {
		const s = live.series[key];
		s.push(v);
		if (s.length > LIVE_POINTS) s.shift();
	};
	for (const key of ["enqueued", "delivered", "acked"]) {
		const d = sumOf(snap, key) - sumOf(prev.snap, key);
		push(key, d >= 0 ? d / dt : null);
	}
	const a = prev.snap.lateness ?? {};
	const b = snap.lateness ?? {};
	const dc = Number(b.count ?? 0) - Number(a.count ?? 0);
	const ds = Number(b.sum_seconds ?? 0) - Number(a.sum_seconds ?? 0);
	push("lateness", dc > 0 ? ds / dc : dc === 0 ? null : null);
	live.p = dc > 0 ? quantiles(a.buckets ?? [], b.buckets ?? [], dc) : {};
}

/** p50 and p99 from the deltas of cumulative histogram buckets (the bucket's upper bound). */
function quantiles(a, b, total) {
	const before = new Map(a.map((x) => [String(x.le), Number(x.count)]));
	const out = {};
	for (const [q, name] of [
		[0.5, "p50"],
		[0.99, "p99"],
	]) {
		for (const x of b) {
			const d = Number(x.count) - (before.get(String(x.le)) ?? 0);
			if (d >= q * total) {
				out[name] = x.le === "+Inf" ? null : Number(x.le);
				break;
			}
		}
	}
	return out;
}

const LIVE_FIELDS = ["enqueued", "delivered", "acked", "dead_lettered", "in_flight", "subscribers"];

function liveTable(snap) {
	const services = [...(snap.services ?? [])].sort((x, y) => x.service.localeCompare(y.service));
	if (services.length === 0)
		return h("p", { class: "empty" }, "No services yet — enqueue a retry to see it here.");
	const cols = [
		"Service",
		"#Enqueued (total)",
		"#Delivered (total)",
		"#Acked (total)",
		"#Dead-lettered (total)",
	];
	const rows = services.map((s) =>
		h(
			"tr",
			{ "data-live-service": s.service },
			h("th", { scope: "row" }, s.service),
			LIVE_FIELDS.map((k) => td(k, num(s[k]), s[k])),
		),
	);
	return table([...cols, "#In flight", "#Subscribers"], rows);
}

/** A fixed-size SVG line chart; draw(values) redraws it in place. */
function chart(def) {
	const W = 300;
	const H = 100;
	const line = h("svg:polyline", { class: "line", fill: "none", points: "" });
	const maxLabel = h("svg:text", { x: 4, y: 12, class: "axis" }, "");
	const svg = h(
		"svg:svg",
		{
			viewBox: `0 0 ${W} ${H}`,
			width: W,
			height: H,
			role: "img",
			"aria-label": def.title,
			preserveAspectRatio: "none",
		},
		h("svg:line", { x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5, class: "grid" }),
		h("svg:line", { x1: 0, y1: 0.5, x2: W, y2: 0.5, class: "grid" }),
		line,
		maxLabel,
	);
	const value = h("span", { class: "value", "data-field": def.field }, "–");
	const el = h(
		"figure",
		{ class: "chart", "data-chart": def.key },
		h("figcaption", {}, h("span", {}, def.title), value),
		svg,
	);
	const fmt = (v) => (v == null ? "–" : def.seconds ? dur(v) : rateFmt.format(v));
	return {
		def,
		el,
		draw(values) {
			const known = values.filter((v) => v != null);
			const max = Math.max(def.seconds ? 0.001 : 1, ...known);
			const step = W / (LIVE_POINTS - 1);
			const off = LIVE_POINTS - values.length;
			const pts = [];
			values.forEach((v, i) => {
				if (v == null) return;
				pts.push(`${((off + i) * step).toFixed(1)},${(H - 2 - (v / max) * (H - 16)).toFixed(1)}`);
			});
			line.setAttribute("points", pts.join(" "));
			maxLabel.textContent = `max ${fmt(max)}`;
			const last = values.length ? values[values.length - 1] : null;
			value.textContent = fmt(last);
			value.setAttribute("data-value", last == null ? "" : String(last));
		},
	};
}

// ---- service pages ----------------------------------------------------------------------------

function servicePicker(kind) {
	const box = errorBox();
	const list = h("div", {}, loading());
	const title = kind === "services" ? "Services" : "Dead letters";
	api("services")
		.then((r) => {
			const names = (r.services ?? []).map((s) => s.service).sort();
			clear(
				list,
				names.length === 0
					? h("p", { class: "empty" }, "No services yet — enqueue a retry to see it here.")
					: h(
							"ul",
							{ class: "picker" },
							names.map((n) => h("li", {}, h("a", { href: `#/${kind}/${enc(n)}` }, n))),
						),
			);
		})
		.catch((e) => {
			clear(list);
			box.show(e);
		});
	return h("section", { class: "page" }, h("h1", {}, title), box, list);
}

const POLICY_FIELDS = [
	["max_attempts", "Max attempts", "int"],
	["unlimited_attempts", "Unlimited attempts", "bool"],
	["initial_backoff", "Initial backoff (s)", "num"],
	["max_backoff", "Max backoff (s)", "num"],
	["multiplier", "Multiplier", "num"],
	["jitter", "Jitter (0–1)", "num"],
	["max_retry_duration", "Max retry duration (s)", "num"],
	["ack_timeout", "Ack timeout (s)", "num"],
	["max_deliveries_per_attempt", "Max deliveries per attempt", "int"],
	["non_retryable_error_classes", "Non-retryable error classes", "list"],
];
const DURATION_FIELDS = new Set(["initial_backoff", "max_backoff", "max_retry_duration", "ack_timeout"]);
const LIMIT_FIELDS = [
	["max_dispatch_per_second", "Max dispatch per second", "num"],
	["dispatch_burst", "Dispatch burst", "int"],
	["max_concurrent", "Max concurrent", "int"],
];

function policyValue(k, v) {
	if (v === null || v === undefined) return null;
	if (Array.isArray(v)) return v.length ? v.join(", ") : null;
	if (typeof v === "boolean") return yesNo(v);
	if (DURATION_FIELDS.has(k)) return dur(v);
	return String(v);
}

function servicePage(name) {
	const root = h("div", { class: "page", "data-page": "service", "data-service": name });
	const box = errorBox();
	const head = h("div", { class: "section-head" }, h("h1", {}, name));
	const content = h("div", {}, loading());
	append(root, head, box, content);
	let info = null;

	const actionBox = errorBox();
	const state = h("span", { "data-field": "paused" });
	const pauseBtn = h(
		"button",
		{ type: "button", "data-action": "pause", onclick: () => act("pause") },
		"Pause",
	);
	const resumeBtn = h(
		"button",
		{ type: "button", "data-action": "resume", onclick: () => act("resume") },
		"Resume",
	);
	async function act(which) {
		pauseBtn.disabled = resumeBtn.disabled = true;
		try {
			render(await api(`services/${enc(name)}/${which}`, {}));
			actionBox.show(null);
		} catch (e) {
			actionBox.show(e);
		} finally {
			pauseBtn.disabled = resumeBtn.disabled = false;
		}
	}

	const policyTable = h("tbody");
	const limitsTable = h("tbody");
	const policyForm = fieldsForm("policy", POLICY_FIELDS, "Save policy", async (values) => {
		render(await api(`services/${enc(name)}/policy`, { policy: values }));
	});
	const limitsForm = fieldsForm("limits", LIMIT_FIELDS, "Save limits", async (values) => {
		render(await api(`services/${enc(name)}/limits`, { limits: values }));
	});

	function render(s) {
		info = s?.service && typeof s.service === "object" ? s.service : s;
		if (!info || typeof info !== "object") return load();
		state.setAttribute("data-value", String(!!info.paused));
		clear(
			state,
			h("span", { class: info.paused ? "badge warn" : "badge ok" }, info.paused ? "paused" : "running"),
			info.paused && info.paused_at ? [" since ", timeEl(info.paused_at)] : null,
		);
		pauseBtn.hidden = !!info.paused;
		resumeBtn.hidden = !info.paused;
		clear(
			policyTable,
			POLICY_FIELDS.map(([k, label]) =>
				h(
					"tr",
					{ "data-policy-field": k },
					h("th", { scope: "row" }, label),
					h(
						"td",
						{ "data-field": `policy.${k}` },
						policyValue(k, info.policy?.[k]) ?? h("span", { class: "muted" }, "default"),
					),
					h("td", { "data-field": `effective.${k}` }, policyValue(k, info.effective_policy?.[k]) ?? "–"),
				),
			),
		);
		clear(
			limitsTable,
			LIMIT_FIELDS.map(([k, label]) =>
				h(
					"tr",
					{},
					h("th", { scope: "row" }, label),
					h(
						"td",
						{ "data-field": `limits.${k}` },
						info.limits?.[k] ?? h("span", { class: "muted" }, "unlimited"),
					),
				),
			),
		);
		policyForm.fill(info.policy ?? {});
		limitsForm.fill(info.limits ?? {});
		updated.replaceChildren(timeEl(info.updated_at));
	}
	const updated = h("span");

	async function load() {
		try {
			render(await api(`services/${enc(name)}`));
			box.show(null);
			if (!content.dataset.ready) {
				content.dataset.ready = "1";
				clear(
					content,
					h(
						"section",
						{ class: "card" },
						h("h2", {}, "Dispatch"),
						h("p", {}, "State: ", state, " · updated ", updated),
						h(
							"div",
							{ class: "actions" },
							pauseBtn,
							resumeBtn,
							h("a", { href: `#/dead-letters/${enc(name)}` }, "Dead letters"),
						),
						actionBox,
					),
					h(
						"section",
						{ class: "card" },
						h("h2", {}, "Retry policy"),
						h(
							"div",
							{ class: "table-wrap" },
							h(
								"table",
								{ class: "kv" },
								h(
									"thead",
									{},
									h(
										"tr",
										{},
										h("th", { scope: "col" }, "Field"),
										h("th", { scope: "col" }, "Stored"),
										h("th", { scope: "col" }, "Effective"),
									),
								),
								policyTable,
							),
						),
						h(
							"details",
							{ class: "edit" },
							h("summary", {}, "Edit policy"),
							h("p", { class: "muted" }, "Empty fields are left to the node default. Durations in seconds."),
							policyForm.el,
						),
					),
					h(
						"section",
						{ class: "card" },
						h("h2", {}, "Limits"),
						h("div", { class: "table-wrap" }, h("table", { class: "kv" }, limitsTable)),
						h(
							"details",
							{ class: "edit" },
							h("summary", {}, "Edit limits"),
							h("p", { class: "muted" }, "Empty fields mean unlimited."),
							limitsForm.el,
						),
					),
					purgeSection(name),
				);
			}
		} catch (e) {
			box.show(e);
			if (!content.dataset.ready) clear(content);
		}
	}
	load();
	return root;
}

/** A form of optional fields; submit(values) posts them, errors show next to the button. */
function fieldsForm(kind, fields, label, submit) {
	const box = errorBox();
	const ok = h("p", { class: "ok-msg", role: "status" });
	const inputs = {};
	const rows = fields.map(([k, text, type]) => {
		const id = `${kind}-${k}`;
		let input;
		if (type === "bool") {
			input = h(
				"select",
				{ id, name: k },
				h("option", { value: "" }, "default"),
				h("option", { value: "true" }, "yes"),
				h("option", { value: "false" }, "no"),
			);
		} else {
			input = h("input", {
				id,
				name: k,
				type: "text",
				inputmode: type === "list" ? "text" : type === "int" ? "numeric" : "decimal",
				autocomplete: "off",
				spellcheck: "false",
				placeholder: type === "list" ? "e.g. http.400, auth" : "default",
			});
		}
		inputs[k] = [input, type];
		return h("div", { class: "field" }, h("label", { for: id }, text), input);
	});
	const button = h("button", { type: "submit" }, label);
	const el = h(
		"form",
		{
			class: "fields",
			"data-form": kind,
			novalidate: true,
			onsubmit: async (ev) => {
				ev.preventDefault();
				ok.textContent = "";
				let values;
				try {
					values = {};
					for (const [k, [input, type]] of Object.entries(inputs))
						values[k] = parseField(k, input.value, type);
				} catch (e) {
					return box.show(e);
				}
				button.disabled = true;
				try {
					await submit(values);
					box.show(null);
					ok.textContent = "Saved.";
				} catch (e) {
					box.show(e);
				} finally {
					button.disabled = false;
				}
			},
		},
		h("div", { class: "grid" }, rows),
		h("div", { class: "actions" }, button, ok),
		box,
	);
	return {
		el,
		fill(values) {
			for (const [k, [input, type]] of Object.entries(inputs)) {
				const v = values[k];
				if (type === "bool") input.value = v == null ? "" : String(v);
				else if (type === "list") input.value = (v ?? []).join(", ");
				else input.value = v == null ? "" : String(v);
			}
		},
	};
}

function parseField(k, raw, type) {
	const v = raw.trim();
	if (type === "list") {
		return v
			? v
					.split(/[\s,]+/)
					.map((x) => x.trim())
					.filter(Boolean)
			: [];
	}
	if (v === "") return null;
	if (type === "bool") return v === "true";
	const n = Number(v);
	if (!Number.isFinite(n)) throw new Error(`${k}: ${JSON.stringify(v)} is not a number`);
	if (type === "int" && !Number.isInteger(n)) throw new Error(`${k}: ${v} is not a whole number`);
	return n;
}

/** A confirmation dialog: the user types `name`; resolves true when confirmed. */
function confirmTyped(title, text, name) {
	return new Promise((resolve) => {
		const input = h("input", { id: "confirm-name", type: "text", autocomplete: "off", spellcheck: "false" });
		const go = h(
			"button",
			{ type: "submit", class: "danger", disabled: true, "data-action": "confirm" },
			title,
		);
		input.addEventListener("input", () => (go.disabled = input.value !== name));
		const dialog = h(
			"dialog",
			{ class: "confirm", "aria-labelledby": "confirm-h" },
			h(
				"form",
				{
					method: "dialog",
					onsubmit: (ev) => {
						ev.preventDefault();
						if (input.value !== name) return;
						dialog.close("ok");
					},
				},
				h("h2", { id: "confirm-h" }, title),
				h("p", {}, text),
				h("label", { for: "confirm-name" }, "Type ", h("code", {}, name), " to confirm"),
				input,
				h(
					"div",
					{ class: "actions" },
					go,
					h(
						"button",
						{ type: "button", "data-action": "cancel", onclick: () => dialog.close("cancel") },
						"Cancel",
					),
				),
			),
		);
		dialog.addEventListener("close", () => {
			dialog.remove();
			resolve(dialog.returnValue === "ok");
		});
		document.body.append(dialog);
		dialog.showModal();
		input.focus();
	});
}

function purgeSection(name) {
	const box = errorBox();
	const progress = h("p", { class: "progress", role: "status", "data-field": "purge_progress" });
	const button = h(
		"button",
		{
			type: "button",
			class: "danger",
			"data-action": "purge",
			onclick: async () => {
				const yes = await confirmTyped(
					"Purge service",
					`Cancels every pending retry of ${name} scheduled before now and deletes its buckets. This cannot be undone.`,
					name,
				);
				if (!yes) return;
				button.disabled = true;
				box.show(null);
				let before = null;
				let cancelled = 0;
				let deleted = 0;
				try {
					for (;;) {
						const r = await api(`services/${enc(name)}/purge`, { before, max_buckets: 100 });
						before ??= r.before;
						cancelled += Number(r.cancelled ?? 0);
						deleted += Number(r.buckets_deleted ?? 0);
						progress.textContent = `${r.done ? "Done" : "Purging…"} ${num(cancelled)} cancelled, ${num(deleted)} buckets deleted${r.buckets_kept ? `, ${num(r.buckets_kept)} kept` : ""}.`;
						if (r.done) break;
					}
				} catch (e) {
					box.show(e);
				} finally {
					button.disabled = false;
				}
			},
		},
		"Purge…",
	);
	return h(
		"section",
		{ class: "card" },
		h("h2", {}, "Purge"),
		h("p", { class: "muted" }, "Cancel every pending retry scheduled before now."),
		h("div", { class: "actions" }, button),
		progress,
		box,
	);
}

// ---- dead letters -----------------------------------------------------------------------------

function deadLettersPage(name) {
	const root = h("div", { class: "page", "data-page": "dead-letters", "data-service": name });
	const listBox = errorBox();
	const actBox = errorBox();
	const progress = h("p", { class: "progress", role: "status", "data-field": "redrive_progress" });
	const f = {
		from: h("input", { id: "dl-from", type: "datetime-local", step: 1 }),
		to: h("input", { id: "dl-to", type: "datetime-local", step: 1 }),
		err: h("input", {
			id: "dl-error",
			type: "search",
			autocomplete: "off",
			placeholder: "substring of the last error",
		}),
		redriven: h("input", { id: "dl-redriven", type: "checkbox" }),
		rate: h("input", {
			id: "dl-rate",
			type: "number",
			min: 1,
			max: 100000,
			value: "500",
			inputmode: "numeric",
		}),
	};
	const body = h("div", { class: "dl-body" }, loading());
	const pager = h("div", { class: "actions pager" });
	let filter = null;
	let pageToken = "";
	let pages = [];
	let letters = [];
	const selected = new Map();

	function readFilter() {
		return {
			from: localToUtc(f.from.value),
			to: localToUtc(f.to.value),
			error_contains: f.err.value,
			include_redriven: f.redriven.checked,
		};
	}
	function query(fl, tok) {
		const q = new URLSearchParams();
		if (fl.from) q.set("from", fl.from);
		if (fl.to) q.set("to", fl.to);
		if (fl.error_contains) q.set("error_contains", fl.error_contains);
		if (fl.include_redriven) q.set("include_redriven", "true");
		q.set("page_size", "100");
		if (tok) q.set("page_token", tok);
		return q.toString();
	}
	async function load(tok = "") {
		try {
			filter ??= readFilter();
			const r = await api(`services/${enc(name)}/dead-letters?${query(filter, tok)}`);
			pageToken = tok;
			letters = r.dead_letters ?? [];
			selected.clear();
			listBox.show(null);
			renderList(r.next_page_token || "");
		} catch (e) {
			listBox.show(e);
			loaded(body);
		}
	}
	function renderList(next) {
		if (letters.length === 0) {
			clear(body, h("p", { class: "empty", "data-empty": "dead-letters" }, "No dead letters"));
		} else {
			const all = h("input", {
				type: "checkbox",
				"aria-label": "Select all on this page",
				"data-action": "select-all",
				onchange: () => {
					for (const c of body.querySelectorAll("input[data-letter]")) {
						c.checked = all.checked;
						c.dispatchEvent(new Event("change"));
					}
				},
			});
			const rows = letters.map((d) => {
				const key = `${d.transaction_id}\u0000${d.dead_at}`;
				const box = h("input", {
					type: "checkbox",
					"data-letter": d.transaction_id,
					"aria-label": `Select ${d.transaction_id}`,
					onchange: () => {
						if (box.checked) selected.set(key, { transaction_id: d.transaction_id, dead_at: d.dead_at });
						else selected.delete(key);
						redriveSel.disabled = selected.size === 0;
						redriveSel.textContent = `Redrive selected (${selected.size})`;
					},
				});
				const link = h("a", { href: `#/retry/${enc(name)}/${enc(d.transaction_id)}` }, d.transaction_id);
				return h(
					"tr",
					{ "data-transaction": d.transaction_id },
					[box, link, num(d.attempt)].map((x) => h("td", {}, x)),
					h("td", { class: "err-text" }, d.last_error || "–"),
					[d.dead_at, d.redriven_at].map((t) => h("td", {}, timeEl(t))),
				);
			});
			const cols = [all, "Transaction", "#Attempt", "Last error", "Dead at", "Redriven at"];
			clear(body, table(cols, rows, "letters"));
		}
		redriveSel.disabled = true;
		redriveSel.textContent = "Redrive selected (0)";
		clear(
			pager,
			pages.length
				? h("button", { type: "button", onclick: () => load(pages.pop() ?? "") }, "← Previous page")
				: null,
			next
				? h(
						"button",
						{
							type: "button",
							"data-action": "next-page",
							onclick: () => {
								pages.push(pageToken);
								load(next);
							},
						},
						"Next page →",
					)
				: null,
		);
	}
	function rate() {
		const n = Number(f.rate.value || 500);
		if (!Number.isInteger(n) || n < 1) throw new Error("max per second: a whole number of at least 1");
		return n;
	}
	async function busy(fn) {
		for (const b of actions.querySelectorAll("button")) b.disabled = true;
		actBox.show(null);
		try {
			await fn();
		} catch (e) {
			actBox.show(e);
		} finally {
			for (const b of actions.querySelectorAll("button")) b.disabled = false;
			redriveSel.disabled = selected.size === 0;
			await load(pageToken);
		}
	}
	const redriveSel = h(
		"button",
		{
			type: "button",
			"data-action": "redrive-selected",
			disabled: true,
			onclick: () =>
				busy(async () => {
					const list = [...selected.values()];
					const r = await api(`services/${enc(name)}/dead-letters/redrive`, {
						letters: list,
						delay: null,
						max_per_second: rate(),
					});
					progress.textContent = `Redriven ${num(r.redriven)}, skipped ${num(r.skipped)}.`;
				}),
		},
		"Redrive selected (0)",
	);
	const redriveAll = h(
		"button",
		{
			type: "button",
			"data-action": "redrive-all",
			onclick: () =>
				busy(async () => {
					const fl = filter ?? readFilter();
					const perSecond = rate();
					let redriven = 0;
					let skipped = 0;
					progress.textContent = "Redriving…";
					for (;;) {
						const r = await api(`services/${enc(name)}/dead-letters/redrive`, {
							from: fl.from,
							to: fl.to,
							error_contains: fl.error_contains,
							delay: null,
							max_items: 1000,
							max_per_second: perSecond,
						});
						redriven += Number(r.redriven ?? 0);
						skipped += Number(r.skipped ?? 0);
						progress.textContent = `${r.done ? "Done:" : "Redriving…"} ${num(redriven)} redriven, ${num(skipped)} skipped.`;
						if (r.done) break;
					}
				}),
		},
		"Redrive all matching",
	);
	const purge = h(
		"button",
		{
			type: "button",
			class: "danger",
			"data-action": "purge-dead-letters",
			onclick: async () => {
				const fl = filter ?? readFilter();
				const range = fl.from || fl.to ? "in the chosen time range" : "of every day kept";
				const ignored = fl.error_contains
					? ` The error filter does not apply: every letter ${range} goes, whatever its error.`
					: "";
				const yes = await confirmTyped(
					"Purge dead letters",
					`Deletes every dead letter of ${name} ${range}, redriven ones included.${ignored} This cannot be undone.`,
					name,
				);
				if (!yes) return;
				busy(async () => {
					const r = await api(`services/${enc(name)}/dead-letters/purge`, { from: fl.from, to: fl.to });
					progress.textContent = `Purged ${num(r.purged)} dead letters.`;
				});
			},
		},
		"Purge…",
	);
	const actions = h(
		"div",
		{ class: "actions" },
		redriveSel,
		redriveAll,
		h("label", { for: "dl-rate", class: "inline" }, "Max per second ", f.rate),
		purge,
	);
	const form = h(
		"form",
		{
			class: "fields filter",
			"data-form": "dead-letter-filter",
			onsubmit: (ev) => {
				ev.preventDefault();
				try {
					filter = readFilter();
				} catch (e) {
					return listBox.show(e);
				}
				pages = [];
				load("");
			},
		},
		h(
			"div",
			{ class: "grid" },
			h("div", { class: "field" }, h("label", { for: "dl-from" }, "From (your time)"), f.from),
			h("div", { class: "field" }, h("label", { for: "dl-to" }, "To (your time, exclusive)"), f.to),
			h("div", { class: "field" }, h("label", { for: "dl-error" }, "Error contains"), f.err),
			h("div", { class: "field check" }, f.redriven, h("label", { for: "dl-redriven" }, "Include redriven")),
		),
		h("div", { class: "actions" }, h("button", { type: "submit" }, "Apply filter")),
	);
	append(
		root,
		h(
			"div",
			{ class: "section-head" },
			h("h1", {}, "Dead letters: ", h("a", { href: `#/services/${enc(name)}` }, name)),
		),
		h("section", { class: "card" }, form),
		h("section", { class: "card" }, actions, progress, actBox, listBox, body, pager),
	);
	load();
	return root;
}

// ---- retry lookup -----------------------------------------------------------------------------

function retryPage(service, id) {
	const svc = h("input", {
		id: "retry-service",
		name: "service",
		required: true,
		autocomplete: "off",
		value: service ?? "",
	});
	const tx = h("input", {
		id: "retry-id",
		name: "transaction_id",
		required: true,
		autocomplete: "off",
		value: id ?? "",
	});
	const box = errorBox();
	const out = h("div", { class: "retry-body" });
	const form = h(
		"form",
		{
			class: "fields",
			"data-form": "retry",
			onsubmit: (ev) => {
				ev.preventDefault();
				if (!svc.value.trim() || !tx.value.trim())
					return box.show(new Error("Enter a service and a transaction id."));
				location.hash = `#/retry/${enc(svc.value.trim())}/${enc(tx.value.trim())}`;
			},
		},
		h(
			"div",
			{ class: "grid" },
			h("div", { class: "field" }, h("label", { for: "retry-service" }, "Service"), svc),
			h("div", { class: "field" }, h("label", { for: "retry-id" }, "Transaction id"), tx),
		),
		h("div", { class: "actions" }, h("button", { type: "submit" }, "Look up")),
	);
	if (service && id) {
		append(out, loading());
		api(`services/${enc(service)}/retries/${enc(id)}`)
			.then((r) => clear(out, retryView(r)))
			.catch((e) => {
				clear(out);
				if (e.status === 404)
					box.show(new Error(`No retry ${id} in service ${service}. ${e.message ? `(${e.message})` : ""}`));
				else box.show(e);
			});
	}
	return h(
		"div",
		{ class: "page", "data-page": "retry" },
		h("h1", {}, "Retry lookup"),
		h("section", { class: "card" }, form, box),
		out,
	);
}

function retryView(r) {
	const payload =
		r.payload != null
			? h("pre", { class: "payload", "data-field": "payload" }, r.payload === "" ? "(empty)" : r.payload)
			: h("pre", { class: "payload", "data-field": "payload" }, `base64: ${r.payload_base64 ?? ""}`);
	const attrs = Object.entries(r.attributes ?? {}).sort(([a], [b]) => a.localeCompare(b));
	const trace = r.trace_id
		? r.trace_url
			? h(
					"a",
					{ href: r.trace_url, target: "_blank", rel: "noopener noreferrer", "data-field": "trace" },
					r.trace_id,
				)
			: h("code", { "data-field": "trace" }, r.trace_id)
		: "–";
	const loc = r.location;
	const rows = [
		["Service", r.service],
		["Transaction id", h("code", {}, r.transaction_id)],
		[
			"State",
			h("span", { class: `badge s-${String(r.status).toLowerCase()}`, "data-field": "status" }, r.status),
		],
		["Attempt", h("span", { "data-field": "attempt" }, num(r.attempt))],
		["Due", timeEl(r.due_time)],
		[
			"Last error",
			r.last_error ? h("span", { class: "err-text", "data-field": "last_error" }, r.last_error) : "–",
		],
		["Enqueue count", h("span", { "data-field": "enqueue_count" }, num(r.enqueue_count))],
		["Delivery count", h("span", { "data-field": "delivery_count" }, num(r.delivery_count))],
		["First enqueued", timeEl(r.first_enqueued_at)],
		["Last enqueued", timeEl(r.last_enqueued_at)],
		["Updated", timeEl(r.updated_at)],
		[
			"Location",
			loc
				? [
						h("a", { href: `#/window/${enc(loc.day)}/${loc.window}` }, `${loc.day} window ${loc.window}`),
						`, instance ${loc.instance}, bucket ${loc.bucket}`,
					]
				: "–",
		],
		["Generation", h("code", {}, r.generation ?? "–")],
		["Trace", trace],
		[
			"Attributes",
			attrs.length
				? h(
						"dl",
						{ class: "attrs" },
						attrs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
					)
				: h("span", { class: "muted" }, "none"),
		],
		["Payload", payload],
	];
	return h(
		"section",
		{ class: "card", "data-retry": r.transaction_id },
		h("h2", {}, r.transaction_id),
		kvList(rows),
	);
}

function kvList(rows) {
	return h(
		"dl",
		{ class: "kvl" },
		rows.map(([k, v]) => h("div", {}, h("dt", {}, k), h("dd", {}, v))),
	);
}

// ---- ring -------------------------------------------------------------------------------------

const TOKEN_SPACE = 2n ** 64n;

function share(ranges) {
	let w = 0n;
	for (const r of ranges ?? []) {
		const d = BigInt(r.end) - BigInt(r.start) + 1n;
		if (d > 0n) w += d;
	}
	return Number((w * 1000000n) / TOKEN_SPACE) / 10000;
}

function ringPage() {
	const box = errorBox();
	const out = h("div", {}, loading());
	const at = h("span", { "data-field": "measured_at" }, "–");
	const button = h("button", { type: "button", "data-action": "refresh", onclick: load }, "Refresh");
	async function load() {
		button.disabled = true;
		try {
			const r = await api("ring");
			box.show(null);
			clear(at, timeEl(new Date().toISOString()));
			clear(out, ringTable(r));
		} catch (e) {
			box.show(e);
			loaded(out);
		} finally {
			button.disabled = false;
		}
	}
	load();
	return h(
		"div",
		{ class: "page", "data-page": "ring" },
		h(
			"div",
			{ class: "section-head" },
			h("h1", {}, "Ring"),
			h("span", { class: "muted" }, "Measured at ", at),
			button,
		),
		h("section", { class: "card" }, box, out),
	);
}

function ringTable(r) {
	const stats = new Map();
	for (const n of r.node_stats ?? r.stats_nodes ?? r.stats?.nodes ?? []) stats.set(n.node_id, n);
	const nodes = r.nodes ?? [];
	if (nodes.length === 0 && stats.size === 0) return h("p", { class: "empty" }, "No nodes in the ring.");
	const ids = [...new Set([...nodes.map((n) => n.node_id), ...stats.keys()])].sort();
	const byId = new Map(nodes.map((n) => [n.node_id, n]));
	const cols = ["Node", "Address", "#Ranges", "#Share", "Compactor"];
	if (session.admin) cols.push("#Slots", "#In flight", "#Subscribers", "#Clock offset", "Reachable");
	const rows = ids.map((id) => {
		const n = byId.get(id) ?? {};
		const s = stats.get(id) ?? n;
		const ranges = n.ranges ?? [];
		const cells = [
			h("th", { scope: "row" }, id),
			h("td", {}, n.address ?? s.address ?? "–"),
			td("ranges", num(ranges.length), ranges.length),
			td("share", `${share(ranges).toFixed(2)} %`),
			td("compactor", yesNo(n.compactor ?? s.compactor)),
		];
		if (session.admin) {
			const off = s.clock_offset_ms;
			cells.push(
				td("held_slots", num(s.held_slots), s.held_slots),
				td("in_flight", num(s.in_flight), s.in_flight),
				td("subscribers", num(s.subscribers), s.subscribers),
				td("clock_offset_ms", off == null ? "own clock" : `${num(off)} ms`, off),
				td("reachable", s.reachable == null ? "–" : badge(yesNo(s.reachable), s.reachable ? "ok" : "bad")),
			);
		}
		return h("tr", { "data-node": id }, cells);
	});
	return table(cols, rows, "ring");
}

// ---- window inspector -------------------------------------------------------------------------

function currentWindow() {
	const now = new Date();
	const ws = Number(session.window_seconds) || 1;
	const secs = now.getUTCHours() * 3600 + now.getUTCMinutes() * 60 + now.getUTCSeconds();
	return { day: now.toISOString().slice(0, 10), window: Math.floor(secs / ws) };
}

function windowPage(day, win) {
	const cur = currentWindow();
	const dayIn = h("input", { id: "win-day", type: "date", required: true, value: day ?? cur.day });
	const winIn = h("input", {
		id: "win-index",
		type: "number",
		min: 0,
		step: 1,
		required: true,
		inputmode: "numeric",
		value: win ?? String(cur.window),
	});
	const box = errorBox();
	const out = h("div", {});
	const form = h(
		"form",
		{
			class: "fields",
			"data-form": "window",
			onsubmit: (ev) => {
				ev.preventDefault();
				if (!dayIn.value || winIn.value === "") return box.show(new Error("Enter a day and a window index."));
				location.hash = `#/window/${dayIn.value}/${Number(winIn.value)}`;
			},
		},
		h(
			"div",
			{ class: "grid" },
			h("div", { class: "field" }, h("label", { for: "win-day" }, "Day (UTC)"), dayIn),
			h(
				"div",
				{ class: "field" },
				h("label", { for: "win-index" }, `Window (${session.window_seconds ?? "?"} s each)`),
				winIn,
			),
		),
		h(
			"div",
			{ class: "actions" },
			h("button", { type: "submit" }, "Inspect"),
			h("a", { href: `#/window/${cur.day}/${cur.window}` }, "Current window"),
		),
	);
	if (day && win !== undefined) {
		append(out, loading());
		api(`windows/${enc(day)}/${enc(win)}`)
			.then((w) => clear(out, windowView(w, day, Number(win))))
			.catch((e) => {
				clear(out);
				box.show(e);
			});
	}
	return h(
		"div",
		{ class: "page", "data-page": "window" },
		h("h1", {}, "Window inspector"),
		h("section", { class: "card" }, form, box),
		out,
	);
}

function windowView(w, day, win) {
	const instances = w.instances ?? [];
	const pointers = instances.reduce(
		(a, i) => a + (i.buckets ?? []).reduce((b, x) => b + Number(x.pointers), 0),
		0,
	);
	const nav = h(
		"p",
		{ class: "actions" },
		win > 0 ? h("a", { href: `#/window/${day}/${win - 1}` }, "← Previous window") : null,
		h("a", { href: `#/window/${day}/${win + 1}` }, "Next window →"),
	);
	return h(
		"div",
		{},
		h(
			"section",
			{ class: "card", "data-window": `${day}/${win}` },
			h("h2", {}, `${day} window ${win}`),
			kvList([
				["Starts", timeEl(w.window_start)],
				["Ends", timeEl(w.window_end)],
				["Window length", dur(w.window_seconds)],
				["Readable", h("span", { "data-field": "readable" }, yesNo(w.readable))],
				["Tier 1: day listed", h("span", { "data-field": "day_listed" }, yesNo(w.day_listed))],
				["Tier 2: window listed", h("span", { "data-field": "window_listed" }, yesNo(w.window_listed))],
				["Low water", h("span", { "data-field": "low_water" }, num(w.low_water))],
				["Tier 3: instances", h("span", { "data-field": "instances" }, num(instances.length))],
				["Tier 5: pointers", h("span", { "data-field": "pointers" }, num(pointers))],
			]),
			nav,
		),
		h(
			"section",
			{ class: "card" },
			h("h2", {}, "Instances and buckets (tiers 3–5)"),
			instances.length === 0
				? h("p", { class: "empty" }, "No instances in this window.")
				: table(
						["Service", "Instance", "Instance token", "Buckets (tier 4): pointers (tier 5)", "#Pointers"],
						instances.map(instanceRow),
					),
		),
	);
}

function instanceRow(i) {
	const buckets = i.buckets ?? [];
	return h(
		"tr",
		{ "data-instance": i.instance },
		h("td", {}, i.service),
		h("td", {}, h("code", {}, i.instance)),
		h("td", {}, h("code", {}, i.instance_token)),
		h(
			"td",
			{},
			buckets.length
				? h(
						"ul",
						{ class: "buckets" },
						buckets.map((b) => h("li", {}, `#${b.bucket}: ${num(b.pointers)}`)),
					)
				: "none",
		),
		td("pointers", num(buckets.reduce((a, b) => a + Number(b.pointers), 0))),
	);
}

// ---- start ------------------------------------------------------------------------------------

window.addEventListener("hashchange", () => {
	if (location.hash === "#main") return;
	route();
	$("#main").focus({ preventScroll: true });
});
document.addEventListener("click", (ev) => {
	const a = ev.target.closest?.("a.skip");
	if (!a) return;
	ev.preventDefault();
	$("#main").focus();
});
start();
