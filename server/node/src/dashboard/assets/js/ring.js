// The ring (#/ring): nodes, token ranges and, for admins, each node's stats.

import { api } from "./api.js";
import { badge, clear, errorBox, h, loaded, loading, table, td } from "./dom.js";
import { num, timeEl, yesNo } from "./format.js";
import { session } from "./state.js";

const TOKEN_SPACE = 2n ** 64n;

function share(ranges) {
	let w = 0n;
	for (const r of ranges ?? []) {
		const d = BigInt(r.end) - BigInt(r.start) + 1n;
		if (d > 0n) w += d;
	}
	return Number((w * 1000000n) / TOKEN_SPACE) / 10000;
}

export function ringPage() {
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
