// The dead letters of one service (#/dead-letters/{service}): filter, paging, redrive, purge.

import { api, enc } from "./api.js";
import { append, clear, errorBox, h, loaded, loading, table } from "./dom.js";
import { localToUtc, num, timeEl } from "./format.js";
import { confirmTyped } from "./forms.js";
import { field, filterForm, pager } from "./paging.js";

export function deadLettersPage(name) {
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
	const pages = pager(load);
	let filter = null;
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
			letters = r.dead_letters ?? [];
			selected.clear();
			listBox.show(null);
			renderList();
			pages.shown(tok, r.next_page_token || "");
		} catch (e) {
			listBox.show(e);
			loaded(body);
		}
	}
	function renderList() {
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
			await load(pages.token);
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
	const form = filterForm(
		"dead-letter-filter",
		[
			field("dl-from", "From (your time)", f.from),
			field("dl-to", "To (your time, exclusive)", f.to),
			field("dl-error", "Error contains", f.err),
			h("div", { class: "field check" }, f.redriven, h("label", { for: "dl-redriven" }, "Include redriven")),
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
		h(
			"div",
			{ class: "section-head" },
			h("h1", {}, "Dead letters: ", h("a", { href: `#/services/${enc(name)}` }, name)),
		),
		h("section", { class: "card" }, form),
		h("section", { class: "card" }, actions, progress, actBox, listBox, body, pages.el),
	);
	load();
	return root;
}
