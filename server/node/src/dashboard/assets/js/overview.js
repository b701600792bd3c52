// The overview page (#/): GetStats per service (admins) and this node's live rates.

import { api, enc } from "./api.js";
import { LIVE_POINTS, chart } from "./charts.js";
import { append, badge, clear, errorBox, h, loaded, loading, table, td } from "./dom.js";
import { dur, num, timeEl } from "./format.js";
import { onLeave, session } from "./state.js";

const LIVE_EVERY_MS = 3000;

const BANDS = [
	["overdue", "Overdue"],
	["within_minute", "≤ 1 min"],
	["within_hour", "≤ 1 h"],
	["within_day", "≤ 1 day"],
	["later", "Later"],
];

export function overview() {
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
			clear(
				body,
				statsTable(stats, services),
				nodesSummary(stats.nodes ?? []),
				holdsTable(stats.holds ?? []),
			);
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

// The dependency holds in force: no retry naming one is delivered until it ends.
function holdsTable(holds) {
	if (holds.length === 0) return h("p", { class: "muted", "data-field": "holds" }, "No dependency is held.");
	return h(
		"table",
		{ class: "holds", "data-field": "holds" },
		h("caption", {}, "Dependency holds"),
		h(
			"thead",
			{},
			h(
				"tr",
				{},
				["Dependency", "Until", "Source", "Reason"].map((t) => h("th", { scope: "col" }, t)),
			),
		),
		h(
			"tbody",
			{},
			holds.map((x) =>
				h(
					"tr",
					{ "data-hold": x.dependency },
					h("td", {}, x.dependency),
					h("td", {}, timeEl(x.until)),
					h("td", {}, x.source),
					h("td", {}, x.reason || "–"),
				),
			),
		),
	);
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
	onLeave(() => {
		stopped = true;
		clearTimeout(timer);
	});
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
