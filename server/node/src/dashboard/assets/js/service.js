// The service pages: the picker (#/services, #/dead-letters, #/retries) and one service (#/services/{service}):
// policy, limits, pause and resume, the push target, purge.

import { api, enc } from "./api.js";
import { append, clear, errorBox, h, loading } from "./dom.js";
import { dur, num, timeEl, yesNo } from "./format.js";
import { confirmTyped, fieldsForm } from "./forms.js";
import { pushSection } from "./push.js";

export function servicePicker(kind) {
	const box = errorBox();
	const list = h("div", {}, loading());
	const title = { services: "Services", "dead-letters": "Dead letters", retries: "Scheduled retries" }[kind];
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

export function servicePage(name) {
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
	const push = pushSection(name);

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
		push.show(info.push_target ?? null);
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
							h("a", { href: `#/retries/${enc(name)}` }, "Scheduled retries"),
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
					push.el,
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
