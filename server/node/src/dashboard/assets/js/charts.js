// The overview's live charts: fixed-size SVG line charts of the last LIVE_POINTS values.

import { h } from "./dom.js";
import { dur, rateFmt } from "./format.js";

export const LIVE_POINTS = 60;

/** A fixed-size SVG line chart; draw(values) redraws it in place. */
export function chart(def) {
	const W = 300;
	const H = 100;
	const line = h("svg:polyline", { class: "line", fill: "none", points: "" });
	const maxLabel = h("svg:text", { x: 4, y: 12, class: "axis" }, "");
	const svg = h(
		"svg:svg",
		{
			viewBox: `0 0 ${W} ${H}`,
			width: W,
			height: H,
			role: "img",
			"aria-label": def.title,
			preserveAspectRatio: "none",
		},
		h("svg:line", { x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5, class: "grid" }),
		h("svg:line", { x1: 0, y1: 0.5, x2: W, y2: 0.5, class: "grid" }),
		line,
		maxLabel,
	);
	const value = h("span", { class: "value", "data-field": def.field }, "–");
	const el = h(
		"figure",
		{ class: "chart", "data-chart": def.key },
		h("figcaption", {}, h("span", {}, def.title), value),
		svg,
	);
	const fmt = (v) => (v == null ? "–" : def.seconds ? dur(v) : rateFmt.format(v));
	return {
		def,
		el,
		draw(values) {
			const known = values.filter((v) => v != null);
			const max = Math.max(def.seconds ? 0.001 : 1, ...known);
			const step = W / (LIVE_POINTS - 1);
			const off = LIVE_POINTS - values.length;
			const pts = [];
			values.forEach((v, i) => {
				if (v == null) return;
				pts.push(`${((off + i) * step).toFixed(1)},${(H - 2 - (v / max) * (H - 16)).toFixed(1)}`);
			});
			line.setAttribute("points", pts.join(" "));
			maxLabel.textContent = `max ${fmt(max)}`;
			const last = values.length ? values[values.length - 1] : null;
			value.textContent = fmt(last);
			value.setAttribute("data-value", last == null ? "" : String(last));
		},
	};
}
