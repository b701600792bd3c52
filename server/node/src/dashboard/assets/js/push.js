// The service page's push target panel: where the node POSTs the service's retries (docs/push.md),
// its secrets and header values masked as the node answers them; the form that sets or replaces
// it (its headers filled in masked: a replacement gives their values again), and Clear.

import { api, enc } from "./api.js";
import { clear, errorBox, h, kvList } from "./dom.js";
import { dur, num, timeEl } from "./format.js";
import { confirmTyped, fieldsForm } from "./forms.js";

const PUSH_FIELDS = [
	["url", "URL", "url", "https://hooks.example.com/rebound"],
	["timeout", "Timeout (s)", "num", "default: 30"],
	["max_concurrent", "Max concurrent (per node)", "int", "default: 64"],
	["headers", "Headers (one Name: value a line)", "lines", "X-Team: payments"],
	["secret", "Signing secret", "secret", "whsec_…"],
	["next_secret", "Second secret (while rotating)", "secret", "optional"],
];

/** Headers as the form's lines, by name. */
function headerLines(headers) {
	return Object.entries(headers ?? {})
		.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
		.map(([k, v]) => `${k}: ${v}`);
}

/** The panel; show(target or null) renders the target the node answered. */
export function pushSection(name) {
	const body = h("div", {});
	const box = errorBox();
	let shown; // the target shown, as JSON: the form is filled again only when it changes
	const summary = h("summary", {}, "Set push target");
	const form = fieldsForm("push", PUSH_FIELDS, "Save push target", async (v) => {
		const r = await api(`services/${enc(name)}/push-target`, {
			target: {
				url: v.url,
				timeout: v.timeout,
				headers: v.headers,
				signing_secrets: [v.secret, v.next_secret].filter(Boolean),
				max_concurrent: v.max_concurrent,
			},
		});
		show(r?.push_target ?? null);
	});
	const clearBtn = h(
		"button",
		{
			type: "button",
			class: "danger",
			"data-action": "clear-push-target",
			onclick: async () => {
				const yes = await confirmTyped(
					"Clear push target",
					`The retries of ${name} go to its Subscribe streams again, on every node within the settings refresh interval. Setting the target back needs its signing secrets again.`,
					name,
				);
				if (!yes) return;
				clearBtn.disabled = true;
				try {
					await api(`services/${enc(name)}/push-target/clear`, {});
					box.show(null);
					show(null);
				} catch (e) {
					box.show(e);
				} finally {
					clearBtn.disabled = false;
				}
			},
		},
		"Clear…",
	);

	function show(t) {
		const key = JSON.stringify(t ?? null);
		if (key === shown) return;
		shown = key;
		body.dataset.set = String(!!t);
		summary.textContent = t ? "Replace push target" : "Set push target";
		clearBtn.hidden = !t;
		form.fill(
			t
				? {
						url: t.url,
						timeout: t.timeout,
						max_concurrent: t.max_concurrent,
						headers: headerLines(t.headers).join("\n"),
					}
				: {},
		);
		if (!t) {
			clear(
				body,
				h(
					"p",
					{ "data-field": "push.none" },
					"No push target: the service's retries go to its Subscribe streams (executors).",
				),
			);
			return;
		}
		const lines = headerLines(t.headers);
		const muted = (text) => h("span", { class: "muted" }, text);
		clear(
			body,
			kvList([
				["URL", h("span", { class: "mono", "data-field": "push.url" }, t.url)],
				["Timeout", h("span", { "data-field": "push.timeout", "data-value": t.timeout }, dur(t.timeout))],
				[
					"Headers",
					h(
						"div",
						{ "data-field": "push.headers" },
						lines.length ? lines.map((l) => h("div", { class: "mono" }, l)) : muted("none"),
					),
				],
				[
					"Signing secrets",
					h(
						"div",
						{ "data-field": "push.signing_secrets" },
						(t.signing_secrets ?? []).map((s) => h("div", { class: "mono" }, s)),
					),
				],
				[
					"Max concurrent",
					h("span", { "data-field": "push.max_concurrent" }, num(t.max_concurrent), muted(" per node")),
				],
				["Updated", h("span", { "data-field": "push.updated_at" }, timeEl(t.updated_at))],
			]),
		);
	}

	const el = h(
		"section",
		{ class: "card", "data-section": "push" },
		h("h2", {}, "Push target"),
		body,
		h("div", { class: "actions" }, clearBtn),
		box,
		h(
			"details",
			{ class: "edit" },
			summary,
			h(
				"p",
				{ class: "muted" },
				"Replaces the whole target: give the signing secret again (the node shows it masked only), and a second one while rotating, and each header's value again (shown masked, …: a masked value is refused). Empty timeout and max concurrent take the node's defaults.",
			),
			form.el,
		),
	);
	return { el, show };
}
