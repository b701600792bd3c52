// The scheduled retries of one service (#/retries/{service}): filters, paging, each row linked
// to its retry's page (its attempts).

import { api, enc } from "./api.js";
import { append, clear, errorBox, h, loaded, loading, table } from "./dom.js";
import { localToUtc, num, timeEl } from "./format.js";
import { field, filterForm, pager } from "./paging.js";

// "customer=42, region=eu" as an object; a pair without "=" is an error.
function attributesOf(text) {
	const out = {};
	for (const part of text.split(",")) {
		const p = part.trim();
		if (!p) continue;
		const i = p.indexOf("=");
		if (i <= 0) throw new Error(`attributes: "${p}" is not key=value`);
		out[p.slice(0, i).trim()] = p.slice(i + 1).trim();
	}
	return out;
}

export function retriesPage(name) {
	const root = h("div", { class: "page", "data-page": "retries", "data-service": name });
	const listBox = errorBox();
	const f = {
		attrs: h("input", {
			id: "rt-attrs",
			type: "search",
			autocomplete: "off",
			placeholder: "customer=42, region=eu",
		}),
		err: h("input", {
			id: "rt-error",
			type: "search",
			autocomplete: "off",
			placeholder: "substring of the last error",
		}),
		dep: h("input", {
			id: "rt-dependency",
			type: "search",
			autocomplete: "off",
			placeholder: "payments-gateway",
		}),
		after: h("input", { id: "rt-after", type: "datetime-local", step: 1 }),
		before: h("input", { id: "rt-before", type: "datetime-local", step: 1 }),
	};
	const body = h("div", { class: "rt-body" }, loading());
	const pages = pager(load);
	let filter = null;

	function readFilter() {
		return {
			attributes: attributesOf(f.attrs.value),
			error_contains: f.err.value,
			dependency: f.dep.value.trim(),
			due_after: localToUtc(f.after.value),
			due_before: localToUtc(f.before.value),
		};
	}
	function query(fl, tok) {
		const q = new URLSearchParams();
		if (Object.keys(fl.attributes).length) q.set("attributes", JSON.stringify(fl.attributes));
		if (fl.error_contains) q.set("error_contains", fl.error_contains);
		if (fl.dependency) q.set("dependency", fl.dependency);
		if (fl.due_after) q.set("due_after", fl.due_after);
		if (fl.due_before) q.set("due_before", fl.due_before);
		q.set("page_size", "50");
		if (tok) q.set("page_token", tok);
		return q.toString();
	}
	async function load(tok = "") {
		try {
			filter ??= readFilter();
			const r = await api(`services/${enc(name)}/retries?${query(filter, tok)}`);
			listBox.show(null);
			render(r.retries ?? [], r.next_page_token || "");
			pages.shown(tok, r.next_page_token || "");
		} catch (e) {
			listBox.show(e);
			loaded(body);
		}
	}
	function render(rows, next) {
		if (rows.length === 0) {
			clear(
				body,
				h(
					"p",
					{ class: "empty", "data-empty": "retries" },
					next ? "None on this page — the next one may hold some." : "No scheduled retries match",
				),
			);
		} else {
			const trs = rows.map((r) => {
				const attrs = Object.entries(r.attributes ?? {})
					.sort(([a], [b]) => a.localeCompare(b))
					.map(([k, v]) => `${k}=${v}`)
					.join(" ");
				return h(
					"tr",
					{ "data-transaction": r.transaction_id },
					h("td", {}, h("a", { href: `#/retry/${enc(name)}/${enc(r.transaction_id)}` }, r.transaction_id)),
					h("td", { "data-field": "attempt" }, num(r.attempt)),
					h("td", { "data-field": "due_time" }, timeEl(r.due_time)),
					h("td", { class: "err-text", "data-field": "last_error" }, r.last_error || "–"),
					h("td", { "data-field": "dependency" }, r.dependency || "–"),
					h("td", { "data-field": "delivery_count" }, num(r.delivery_count)),
					h("td", { "data-field": "attributes" }, attrs || "–"),
				);
			});
			clear(
				body,
				table(
					["Transaction", "#Attempt", "Due", "Last error", "Dependency", "#Deliveries", "Attributes"],
					trs,
					"retries",
				),
			);
		}
	}
	const form = filterForm(
		"retries-filter",
		[
			field("rt-attrs", "Attributes", f.attrs),
			field("rt-error", "Error contains", f.err),
			field("rt-dependency", "Dependency", f.dep),
			field("rt-after", "Due from (your time)", f.after),
			field("rt-before", "Due before (your time)", f.before),
		],
		() => {
			try {
				filter = readFilter();
			} catch (e) {
				return listBox.show(e);
			}
			pages.restart();
			load("");
		},
	);
	append(
		root,
		h("div", { class: "section-head" }, h("h1", {}, "Scheduled retries: ", name)),
		h(
			"p",
			{ class: "muted" },
			"Oldest first, by window. Finished retries are looked up by id; dead ones are on the dead-letters page.",
		),
		h("section", { class: "card" }, form),
		h("section", { class: "card" }, listBox, body, pages.el),
	);
	load();
	return root;
}
