// Formatting: times in the viewer's zone, counts, durations.

import { h } from "./dom.js";

const dateTimeFmt = new Intl.DateTimeFormat(undefined, {
	year: "numeric",
	month: "short",
	day: "2-digit",
	hour: "2-digit",
	minute: "2-digit",
	second: "2-digit",
});
const timeFmt = new Intl.DateTimeFormat(undefined, {
	hour: "2-digit",
	minute: "2-digit",
	second: "2-digit",
});
const numFmt = new Intl.NumberFormat(undefined);
export const rateFmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });

/** A <time> in the viewer's zone, the UTC value in datetime and title; "–" when unset. */
export function timeEl(iso, short = false) {
	if (!iso) return h("span", { class: "muted" }, "–");
	const d = new Date(iso);
	if (Number.isNaN(d.getTime())) return h("span", {}, String(iso));
	return h(
		"time",
		{ datetime: d.toISOString(), title: `${d.toISOString()} (UTC)` },
		(short ? timeFmt : dateTimeFmt).format(d),
	);
}

export function num(n) {
	return n === null || n === undefined ? "–" : numFmt.format(Number(n));
}

/** Seconds as "1h 2m 3s", "250ms"; "–" when unset. */
export function dur(s) {
	if (s === null || s === undefined) return "–";
	s = Number(s);
	if (s < 1) return `${Math.round(s * 1000)}ms`;
	const parts = [];
	const units = [
		["d", 86400],
		["h", 3600],
		["m", 60],
	];
	for (const [u, n] of units) {
		if (s >= n) {
			parts.push(`${Math.floor(s / n)}${u}`);
			s %= n;
		}
	}
	const rest = parts.length ? Math.round(s) : Math.round(s * 1000) / 1000;
	if (rest > 0 || parts.length === 0) parts.push(`${rest}s`);
	return parts.slice(0, 3).join(" ");
}

export function yesNo(b) {
	return b === null || b === undefined ? "–" : b ? "yes" : "no";
}

/** datetime-local value (viewer's zone) → RFC 3339 UTC, or null when empty. */
export function localToUtc(v) {
	if (!v) return null;
	const d = new Date(v);
	if (Number.isNaN(d.getTime())) throw new Error(`${v} is not a date and time`);
	return d.toISOString();
}
