// Forms shared by the pages: a form of optional fields, a confirmation by typed name.

import { errorBox, h } from "./dom.js";

/**
 * A form of optional fields; submit(values) posts them, errors show next to the button. A field is
 * [key, label, type, placeholder?]; types: "int", "num", "bool", "list" (comma-separated), "text",
 * "url" and "lines" (a text area) as strings, "secret" (a password input, never filled in).
 */
export function fieldsForm(kind, fields, label, submit) {
	const box = errorBox();
	const ok = h("p", { class: "ok-msg", role: "status" });
	const inputs = {};
	const rows = fields.map(([k, text, type, placeholder]) => {
		const id = `${kind}-${k}`;
		let input;
		if (type === "lines") {
			input = h("textarea", {
				id,
				name: k,
				rows: 3,
				autocomplete: "off",
				spellcheck: "false",
				placeholder,
			});
		} else if (type === "secret") {
			input = h("input", {
				id,
				name: k,
				type: "password",
				autocomplete: "new-password",
				spellcheck: "false",
				placeholder,
			});
		} else if (type === "bool") {
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
				inputmode: INPUT_MODES[type] ?? "decimal",
				autocomplete: "off",
				spellcheck: "false",
				placeholder: placeholder ?? (type === "list" ? "e.g. http.400, auth" : "default"),
			});
		}
		inputs[k] = [input, type];
		const wide = type === "url" || type === "lines";
		return h("div", { class: wide ? "field wide" : "field" }, h("label", { for: id }, text), input);
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
				if (type === "secret") input.value = "";
				else if (type === "bool") input.value = v == null ? "" : String(v);
				else if (type === "list") input.value = (v ?? []).join(", ");
				else input.value = v == null ? "" : String(v);
			}
		},
	};
}

const INPUT_MODES = { list: "text", text: "text", url: "url", int: "numeric" };
const STRING_TYPES = new Set(["text", "url", "lines", "secret"]);

function parseField(k, raw, type) {
	const v = raw.trim();
	if (STRING_TYPES.has(type)) return v === "" ? null : v;
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

/** A confirmation dialog: the user types `name` (null: no typing, one click); resolves true when confirmed. */
export function confirmTyped(title, text, name) {
	return new Promise((resolve) => {
		const input = h("input", { id: "confirm-name", type: "text", autocomplete: "off", spellcheck: "false" });
		const go = h(
			"button",
			{ type: "submit", class: "danger", disabled: name !== null, "data-action": "confirm" },
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
						if (name !== null && input.value !== name) return;
						dialog.close("ok");
					},
				},
				h("h2", { id: "confirm-h" }, title),
				h("p", { "data-field": "confirm-text" }, text),
				name === null
					? null
					: h("label", { for: "confirm-name" }, "Type ", h("code", {}, name), " to confirm"),
				name === null ? null : input,
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
		(name === null ? go : input).focus();
	});
}
