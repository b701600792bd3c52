// What the filtered, paged listings share (dead letters, retries): the filter form and the
// previous / next page buttons.

import { clear, h } from "./dom.js";

/** A filter form: `fields` in a grid, an Apply button that calls `apply`. */
export function filterForm(kind, fields, apply) {
	return h(
		"form",
		{
			class: "fields filter",
			"data-form": kind,
			onsubmit: (ev) => {
				ev.preventDefault();
				apply();
			},
		},
		h("div", { class: "grid" }, fields),
		h("div", { class: "actions" }, h("button", { type: "submit" }, "Apply filter")),
	);
}

/** One labelled input of a filter form. */
export function field(id, label, input) {
	return h("div", { class: "field" }, h("label", { for: id }, label), input);
}

/**
 * The pages of a listing: `load(token)` fetches one; `shown(token, next)` records the page
 * on screen and renders the buttons; `restart()` forgets the pages before.
 */
export function pager(load) {
	const el = h("div", { class: "actions pager" });
	let back = [];
	let token = "";
	return {
		el,
		get token() {
			return token;
		},
		restart() {
			back = [];
		},
		shown(tok, next) {
			token = tok;
			clear(
				el,
				back.length
					? h("button", { type: "button", onclick: () => load(back.pop() ?? "") }, "← Previous page")
					: null,
				next
					? h(
							"button",
							{
								type: "button",
								"data-action": "next-page",
								onclick: () => {
									back.push(token);
									load(next);
								},
							},
							"Next page →",
						)
					: null,
			);
		},
	};
}
