// The scheduled retries of one service (#/retries/{service}): filters, paging, each row linked
// to its retry's page (its attempts); "Run now" and "Cancel" on the rows selected, after a
// confirmation that shows the count.

import { api, enc } from "./api.js";
import { append, clear, errorBox, h, loaded, loading, table } from "./dom.js";
import { localToUtc, num, timeEl } from "./format.js";
import { confirmTyped } from "./forms.js";
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
		status: h(
			"select",
			{ id: "rt-status" },
			["SCHEDULED", "IN_FLIGHT", "DEAD", "SUCCEEDED", "CANCELLED"].map((v) =>
				h("option", { value: v }, v.toLowerCase().replace("_", " ")),
			),
		),
		after: h("input", { id: "rt-after", type: "datetime-local", step: 1 }),
		before: h("input", { id: "rt-before", type: "datetime-local", step: 1 }),
	};
	const body = h("div", { class: "rt-body" }, loading());
	const pages = pager(load);
	let filter = null;
	// The transaction ids checked on this page.
	const selected = new Set();
	const actBox = errorBox();
	const progress = h("p", { class: "progress", role: "status", "data-field": "action_progress" });

	function readFilter() {
		return {
			status: f.status.value,
			attributes: attributesOf(f.attrs.value),
			error_contains: f.err.value,
			dependency: f.dep.value.trim(),
			due_after: localToUtc(f.after.value),
			due_before: localToUtc(f.before.value),
		};
	}
	function query(fl, tok) {
		const q = new URLSearchParams();
		if (fl.status !== "SCHEDULED") q.set("status", fl.status);
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
			selected.clear();
			listBox.show(null);
			render(r.retries ?? [], r.next_page_token || "");
			pages.shown(tok, r.next_page_token || "");
		} catch (e) {
			listBox.show(e);
			loaded(body);
		}
	}
	function render(rows, next) {
		showSelection();
		if (rows.length === 0) {
			clear(
				body,
				h(
					"p",
					{ class: "empty", "data-empty": "retries" },
					next ? "None on this page — the next one may hold some." : "No retries match",
				),
			);
		} else {
			const trs = rows.map((r) => {
				const attrs = Object.entries(r.attributes ?? {})
					.sort(([a], [b]) => a.localeCompare(b))
					.map(([k, v]) => `${k}=${v}`)
					.join(" ");
				const box = h("input", {
					type: "checkbox",
					"data-select": r.transaction_id,
					"aria-label": `Select ${r.transaction_id}`,
					onchange: () => {
						if (box.checked) selected.add(r.transaction_id);
						else selected.delete(r.transaction_id);
						showSelection();
					},
				});
				return h(
					"tr",
					{ "data-transaction": r.transaction_id },
					h("td", {}, box),
					h("td", {}, h("a", { href: `#/retry/${enc(name)}/${enc(r.transaction_id)}` }, r.transaction_id)),
					h("td", { "data-field": "status" }, r.status),
					h("td", { "data-field": "attempt" }, num(r.attempt)),
					h("td", { "data-field": "due_time" }, timeEl(r.due_time)),
					h("td", { class: "err-text", "data-field": "last_error" }, r.last_error || "–"),
					h("td", { "data-field": "dependency" }, r.dependency || "–"),
					h("td", { "data-field": "delivery_count" }, num(r.delivery_count)),
					h("td", { "data-field": "attributes" }, attrs || "–"),
				);
			});
			const all = h("input", {
				type: "checkbox",
				"aria-label": "Select all on this page",
				"data-action": "select-all",
				onchange: () => {
					for (const c of body.querySelectorAll("input[data-select]")) {
						c.checked = all.checked;
						c.dispatchEvent(new Event("change"));
					}
				},
			});
			clear(
				body,
				table(
					[
						all,
						"Transaction",
						"Status",
						"#Attempt",
						"Due",
						"Last error",
						"Dependency",
						"#Deliveries",
						"Attributes",
					],
					trs,
					"retries",
				),
			);
		}
	}
	function showSelection() {
		// Actions act on scheduled retries only.
		// (The actions row is a flex box: the hidden attribute alone would not hide it.)
		actions.style.display = (filter?.status ?? "SCHEDULED") === "SCHEDULED" ? "" : "none";
		runNow.disabled = selected.size === 0;
		cancel.disabled = selected.size === 0;
		runNow.textContent = `Run now (${selected.size})…`;
		cancel.textContent = `Cancel (${selected.size})…`;
	}
	// ActOnRetries on the ids selected, after a confirmation that names the count.
	async function act(action, title, what) {
		const ids = [...selected];
		const n = ids.length;
		const yes = await confirmTyped(
			title,
			what(`${n} selected ${n === 1 ? "retry" : "retries"} of ${name}`),
			null,
		);
		if (!yes) return;
		for (const b of actions.querySelectorAll("button")) b.disabled = true;
		actBox.show(null);
		try {
			const r = await api(`services/${enc(name)}/retry-actions`, {
				action,
				transaction_ids: ids,
				reason: "dashboard",
			});
			progress.textContent = `${title}: ${num(r.changed)} changed, ${num(r.skipped)} skipped (finished or changed meanwhile).`;
		} catch (e) {
			actBox.show(e);
		} finally {
			await load(pages.token);
		}
	}
	const runNow = h(
		"button",
		{
			type: "button",
			"data-action": "run-now",
			disabled: true,
			onclick: () => act("RUN_NOW", "Run now", (them) => `Run ${them} now? No attempt is used.`),
		},
		"Run now (0)…",
	);
	const cancel = h(
		"button",
		{
			type: "button",
			class: "danger",
			"data-action": "cancel-selected",
			disabled: true,
			onclick: () => act("CANCEL", "Cancel retries", (them) => `Cancel ${them}? This cannot be undone.`),
		},
		"Cancel (0)…",
	);
	const actions = h("div", { class: "actions" }, runNow, cancel);
	const form = filterForm(
		"retries-filter",
		[
			field("rt-status", "Status", f.status),
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
		h("div", { class: "section-head" }, h("h1", {}, "Retries: ", name)),
		h(
			"p",
			{ class: "muted" },
			"Scheduled ones oldest first, by window; those in flight by due time, on every node; dead ones in the order they died. Finished retries are looked up by id.",
		),
		h("section", { class: "card" }, form),
		h("section", { class: "card" }, listBox, actions, actBox, progress, body, pages.el),
	);
	load();
	return root;
}
