// Forms shared by the pages: a form of optional fields, a confirmation by typed name.

import { errorBox, h } from "./dom.js";

/** A form of optional fields; submit(values) posts them, errors show next to the button. */
export function fieldsForm(kind, fields, label, submit) {
	const box = errorBox();
	const ok = h("p", { class: "ok-msg", role: "status" });
	const inputs = {};
	const rows = fields.map(([k, text, type]) => {
		const id = `${kind}-${k}`;
		let input;
		if (type === "bool") {
			input = h(
				"select",
				{ id, name: k },
				h("option", { value: "" }, "default"),
				h("option", { value: "true" }, "yes"),
				h("option", { value: "false" }, "no"),
			);
		} else {
			input = h("input", {
				id,
				name: k,
				type: "text",
				inputmode: type === "list" ? "text" : type === "int" ? "numeric" : "decimal",
				autocomplete: "off",
				spellcheck: "false",
				placeholder: type === "list" ? "e.g. http.400, auth" : "default",
			});
		}
		inputs[k] = [input, type];
		return h("div", { class: "field" }, h("label", { for: id }, text), input);
	});
	const button = h("button", { type: "submit" }, label);
	const el = h(
		"form",
		{
			class: "fields",
			"data-form": kind,
			novalidate: true,
			onsubmit: async (ev) => {
				ev.preventDefault();
				ok.textContent = "";
				let values;
				try {
					values = {};
					for (const [k, [input, type]] of Object.entries(inputs))
						values[k] = parseField(k, input.value, type);
				} catch (e) {
					return box.show(e);
				}
				button.disabled = true;
				try {
					await submit(values);
					box.show(null);
					ok.textContent = "Saved.";
				} catch (e) {
					box.show(e);
				} finally {
					button.disabled = false;
				}
			},
		},
		h("div", { class: "grid" }, rows),
		h("div", { class: "actions" }, button, ok),
		box,
	);
	return {
		el,
		fill(values) {
			for (const [k, [input, type]] of Object.entries(inputs)) {
				const v = values[k];
				if (type === "bool") input.value = v == null ? "" : String(v);
				else if (type === "list") input.value = (v ?? []).join(", ");
				else input.value = v == null ? "" : String(v);
			}
		},
	};
}

function parseField(k, raw, type) {
	const v = raw.trim();
	if (type === "list") {
		return v
			? v
					.split(/[\s,]+/)
					.map((x) => x.trim())
					.filter(Boolean)
			: [];
	}
	if (v === "") return null;
	if (type === "bool") return v === "true";
	const n = Number(v);
	if (!Number.isFinite(n)) throw new Error(`${k}: ${JSON.stringify(v)} is not a number`);
	if (type === "int" && !Number.isInteger(n)) throw new Error(`${k}: ${v} is not a whole number`);
	return n;
}

/** A confirmation dialog: the user types `name`; resolves true when confirmed. */
export function confirmTyped(title, text, name) {
	return new Promise((resolve) => {
		const input = h("input", { id: "confirm-name", type: "text", autocomplete: "off", spellcheck: "false" });
		const go = h(
			"button",
			{ type: "submit", class: "danger", disabled: true, "data-action": "confirm" },
			title,
		);
		input.addEventListener("input", () => (go.disabled = input.value !== name));
		const dialog = h(
			"dialog",
			{ class: "confirm", "aria-labelledby": "confirm-h" },
			h(
				"form",
				{
					method: "dialog",
					onsubmit: (ev) => {
						ev.preventDefault();
						if (input.value !== name) return;
						dialog.close("ok");
					},
				},
				h("h2", { id: "confirm-h" }, title),
				h("p", {}, text),
				h("label", { for: "confirm-name" }, "Type ", h("code", {}, name), " to confirm"),
				input,
				h(
					"div",
					{ class: "actions" },
					go,
					h(
						"button",
						{ type: "button", "data-action": "cancel", onclick: () => dialog.close("cancel") },
						"Cancel",
					),
				),
			),
		);
		dialog.addEventListener("close", () => {
			dialog.remove();
			resolve(dialog.returnValue === "ok");
		});
		document.body.append(dialog);
		dialog.showModal();
		input.focus();
	});
}
