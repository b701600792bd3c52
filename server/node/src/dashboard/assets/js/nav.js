// The header: the page links (admin pages for admins only) and who is signed in.

import { token } from "./api.js";
import { $, append, clear, h } from "./dom.js";
import { session } from "./state.js";

const NAV = [
	{ href: "#/", label: "Overview", match: /^#?\/?$/ },
	{ href: "#/services", label: "Services", admin: true, match: /^#\/services/ },
	{ href: "#/retries", label: "Retries", admin: true, match: /^#\/retries/ },
	{ href: "#/dead-letters", label: "Dead letters", admin: true, match: /^#\/dead-letters/ },
	{ href: "#/retry", label: "Retry lookup", match: /^#\/retry(\/|$)/ },
	{ href: "#/ring", label: "Ring", match: /^#\/ring/ },
	{ href: "#/window", label: "Window inspector", admin: true, match: /^#\/window/ },
];

/** The nav and who is signed in; signOut is what the Sign out button does. */
export function renderNav(signOut) {
	const nav = $("#nav");
	const items = NAV.filter((n) => session && (!n.admin || session.admin));
	clear(
		nav,
		h(
			"ul",
			{},
			items.map((n) => h("li", {}, h("a", { href: n.href, "data-nav": n.label }, n.label))),
		),
	);
	markNav();
	const who = $("#who");
	clear(who);
	if (!session) return;
	const name = session.credential ?? (session.auth_required ? "unknown" : "no authentication");
	append(
		who,
		h(
			"span",
			{ class: "muted", title: `node ${session.node_id}, version ${session.version}` },
			`${session.node_id} · `,
			h("span", { "data-field": "credential" }, name),
			session.admin ? " (admin)" : "",
		),
	);
	if (token() || session.auth_required) {
		append(
			who,
			h(
				"button",
				{
					type: "button",
					class: "link",
					"data-action": "sign-out",
					onclick: signOut,
				},
				"Sign out",
			),
		);
	}
}

export function markNav() {
	const hash = location.hash || "#/";
	for (const a of document.querySelectorAll("#nav a")) {
		const n = NAV.find((x) => x.href === a.getAttribute("href"));
		if (n?.match.test(hash)) a.setAttribute("aria-current", "page");
		else a.removeAttribute("aria-current");
	}
}
