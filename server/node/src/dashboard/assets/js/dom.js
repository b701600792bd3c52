// DOM helpers shared by every page. Every value from the server goes into the page through
// textContent or setAttribute, never through innerHTML.

import { errorText } from "./api.js";

/** h("a", {href: "#/"}, "text", child, ...): an element; null/false children are skipped. */
export function h(tag, attrs = {}, ...children) {
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

export function append(el, ...children) {
	for (const c of children.flat(Infinity)) {
		if (c === null || c === undefined || c === false) continue;
		el.append(c instanceof Node ? c : document.createTextNode(String(c)));
	}
	return el;
}

export function clear(el, ...children) {
	el.replaceChildren();
	return append(el, children);
}

export const $ = (sel, root = document) => root.querySelector(sel);

/** A table, stacked into cards on narrow screens; a column name starting with # is numeric. */
export function table(cols, rows, cls = "") {
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
export function td(field, value, raw) {
	return h("td", { "data-field": field, "data-value": raw }, value);
}

/** The placeholder a section shows until its first answer (or error) arrives. */
export function loading() {
	return h("p", { class: "muted loading" }, "Loading…");
}

/** After a failed first load: the placeholder goes, the error stays. */
export function loaded(el) {
	el.querySelector(":scope > .loading")?.remove();
}

export function badge(text, kind) {
	return h("span", { class: `badge ${kind}` }, text);
}

/** An inline error area (role=alert) that a section shows its failures in. */
export function errorBox() {
	const el = h("p", { class: "error", role: "alert", hidden: true });
	el.show = (e) => {
		el.textContent = e ? errorText(e) : "";
		el.hidden = !e;
	};
	return el;
}

export function kvList(rows) {
	return h(
		"dl",
		{ class: "kvl" },
		rows.map(([k, v]) => h("div", {}, h("dt", {}, k), h("dd", {}, v))),
	);
}
