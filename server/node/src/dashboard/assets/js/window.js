// The window inspector (#/window, #/window/{day}/{window}): one window's directory, tier by tier.

import { api, enc } from "./api.js";
import { append, clear, errorBox, h, kvList, loading, table, td } from "./dom.js";
import { dur, num, timeEl, yesNo } from "./format.js";
import { session } from "./state.js";

function currentWindow() {
	const now = new Date();
	const ws = Number(session.window_seconds) || 1;
	const secs = now.getUTCHours() * 3600 + now.getUTCMinutes() * 60 + now.getUTCSeconds();
	return { day: now.toISOString().slice(0, 10), window: Math.floor(secs / ws) };
}

export function windowPage(day, win) {
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
