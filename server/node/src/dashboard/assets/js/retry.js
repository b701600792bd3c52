// Retry lookup (#/retry, #/retry/{service}/{id}): the form and one retry.

import { api, enc } from "./api.js";
import { append, clear, errorBox, h, kvList, loading, table, td } from "./dom.js";
import { dur, num, timeEl } from "./format.js";

export function retryPage(service, id) {
	const svc = h("input", {
		id: "retry-service",
		name: "service",
		required: true,
		autocomplete: "off",
		value: service ?? "",
	});
	const tx = h("input", {
		id: "retry-id",
		name: "transaction_id",
		required: true,
		autocomplete: "off",
		value: id ?? "",
	});
	const box = errorBox();
	const out = h("div", { class: "retry-body" });
	const form = h(
		"form",
		{
			class: "fields",
			"data-form": "retry",
			onsubmit: (ev) => {
				ev.preventDefault();
				if (!svc.value.trim() || !tx.value.trim())
					return box.show(new Error("Enter a service and a transaction id."));
				location.hash = `#/retry/${enc(svc.value.trim())}/${enc(tx.value.trim())}`;
			},
		},
		h(
			"div",
			{ class: "grid" },
			h("div", { class: "field" }, h("label", { for: "retry-service" }, "Service"), svc),
			h("div", { class: "field" }, h("label", { for: "retry-id" }, "Transaction id"), tx),
		),
		h("div", { class: "actions" }, h("button", { type: "submit" }, "Look up")),
	);
	if (service && id) {
		append(out, loading());
		api(`services/${enc(service)}/retries/${enc(id)}`)
			.then((r) => clear(out, retryView(r), attemptsView(r)))
			.catch((e) => {
				clear(out);
				if (e.status === 404)
					box.show(new Error(`No retry ${id} in service ${service}. ${e.message ? `(${e.message})` : ""}`));
				else box.show(e);
			});
	}
	return h(
		"div",
		{ class: "page", "data-page": "retry" },
		h("h1", {}, "Retry lookup"),
		h("section", { class: "card" }, form, box),
		out,
	);
}

// Where a saga's compensation chain stands: the step, this retry's place, and each
// compensation with its status (PENDING: not enqueued yet), linked to its own page.
function chainView(c) {
	if (!c) return "–";
	const step = h(
		"a",
		{ href: `#/retry/${enc(c.saga_service)}/${enc(c.saga_transaction_id)}` },
		c.saga_transaction_id,
	);
	return h(
		"div",
		{ "data-field": "chain" },
		h("div", {}, [
			"saga step ",
			step,
			` (${c.saga_service}), this is ${c.position === 0 ? "the step" : `compensation ${c.position} of ${c.compensations.length}`}`,
		]),
		h(
			"ol",
			{ class: "chain" },
			c.compensations.map((m) =>
				h("li", { "data-chain-step": m.transaction_id }, [
					h("a", { href: `#/retry/${enc(m.service)}/${enc(m.transaction_id)}` }, m.transaction_id),
					` (${m.service}) `,
					h("span", { class: `badge s-${String(m.status).toLowerCase()}` }, m.status),
				]),
			),
		),
	);
}

// Each attempt as a timeline row, oldest first: when it was delivered, the wait since the
// attempt before it ended, how long the executor took, where it ran and how it ended.
function attemptsView(r) {
	const attempts = r.attempts ?? [];
	const outcomeClass = (o) =>
		o === "SUCCEEDED" ? "s-succeeded" : o === "FAILED" || o === "DEADLINE_EXPIRED" ? "s-dead" : "s-scheduled";
	const rows = [];
	attempts.forEach((a, i) => {
		if (i === 1 && r.attempts_dropped > 0)
			rows.push(
				h(
					"tr",
					{ class: "dropped", "data-field": "attempts_dropped" },
					h("td", { colspan: 9, class: "muted" }, `… ${num(r.attempts_dropped)} attempts not kept …`),
				),
			);
		const before = i > 0 ? attempts[i - 1] : null;
		const gap =
			before && before.ended_at && a.delivered_at
				? (Date.parse(a.delivered_at) - Date.parse(before.ended_at)) / 1000
				: null;
		const error = [a.error_class ? `[${a.error_class}] ` : "", a.error || ""].join("") || "–";
		rows.push(
			h(
				"tr",
				{ "data-attempt": a.attempt },
				td("attempt", num(a.attempt), a.attempt),
				td("outcome", h("span", { class: `badge ${outcomeClass(a.outcome)}` }, a.outcome), a.outcome),
				td("delivered_at", timeEl(a.delivered_at)),
				td("gap", gap === null ? "–" : dur(Math.max(gap, 0)), gap),
				td("duration", dur(a.duration), a.duration),
				td("node_id", a.node_id || "–"),
				td("executor_id", a.executor_id || "–"),
				td("retry_after", dur(a.retry_after), a.retry_after),
				h("td", { class: "err-text", "data-field": "error" }, error),
			),
		);
	});
	return h(
		"section",
		{ class: "card", "data-attempts": r.transaction_id },
		h("h2", {}, "Attempts"),
		attempts.length
			? table(
					[
						"#Attempt",
						"Outcome",
						"Delivered",
						"#Waited",
						"#Took",
						"Node",
						"Executor",
						"#Retry after",
						"Error",
					],
					rows,
				)
			: h("p", { class: "muted" }, "No attempt recorded yet."),
	);
}

function retryView(r) {
	const payload =
		r.payload != null
			? h("pre", { class: "payload", "data-field": "payload" }, r.payload === "" ? "(empty)" : r.payload)
			: h("pre", { class: "payload", "data-field": "payload" }, `base64: ${r.payload_base64 ?? ""}`);
	const attrs = Object.entries(r.attributes ?? {}).sort(([a], [b]) => a.localeCompare(b));
	const trace = r.trace_id
		? r.trace_url
			? h(
					"a",
					{
						href: r.trace_url,
						target: "_blank",
						rel: "noopener noreferrer",
						"data-field": "trace",
					},
					r.trace_id,
				)
			: h("code", { "data-field": "trace" }, r.trace_id)
		: "–";
	const loc = r.location;
	const rows = [
		["Service", r.service],
		["Transaction id", h("code", {}, r.transaction_id)],
		[
			"State",
			h(
				"span",
				{
					class: `badge s-${String(r.status).toLowerCase()}`,
					"data-field": "status",
				},
				r.status,
			),
		],
		["Attempt", h("span", { "data-field": "attempt" }, num(r.attempt))],
		["Due", timeEl(r.due_time)],
		[
			"Last error",
			r.last_error ? h("span", { class: "err-text", "data-field": "last_error" }, r.last_error) : "–",
		],
		["Enqueue count", h("span", { "data-field": "enqueue_count" }, num(r.enqueue_count))],
		["Delivery count", h("span", { "data-field": "delivery_count" }, num(r.delivery_count))],
		["First enqueued", timeEl(r.first_enqueued_at)],
		["Last enqueued", timeEl(r.last_enqueued_at)],
		["Updated", timeEl(r.updated_at)],
		[
			"Location",
			loc
				? [
						h("a", { href: `#/window/${enc(loc.day)}/${loc.window}` }, `${loc.day} window ${loc.window}`),
						`, instance ${loc.instance}, bucket ${loc.bucket}`,
					]
				: "–",
		],
		["Compensation chain", chainView(r.chain)],
		["Generation", h("code", {}, r.generation ?? "–")],
		["Trace", trace],
		[
			"Attributes",
			attrs.length
				? h(
						"dl",
						{ class: "attrs" },
						attrs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
					)
				: h("span", { class: "muted" }, "none"),
		],
		["Payload", payload],
	];
	return h(
		"section",
		{ class: "card", "data-retry": r.transaction_id },
		h("h2", {}, r.transaction_id),
		kvList(rows),
	);
}
