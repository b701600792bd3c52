// The Rebound dashboard: plain DOM, no framework, no build step, ES modules (js/). Every value
// from the server goes into the page through textContent or setAttribute, never through innerHTML.
// This entry signs in, routes the hash to a page and starts.

import { TOKEN_KEY, api, onUnauthorized, token } from "./js/api.js";
import { deadLettersPage } from "./js/dead-letters.js";
import { $, clear, errorBox, h } from "./js/dom.js";
import { markNav, renderNav } from "./js/nav.js";
import { overview } from "./js/overview.js";
import { retriesPage } from "./js/retries.js";
import { retryPage } from "./js/retry.js";
import { ringPage } from "./js/ring.js";
import { servicePage, servicePicker } from "./js/service.js";
import { leavePage, session, setSession } from "./js/state.js";
import { windowPage } from "./js/window.js";

function showSignIn(err) {
	leavePage();
	setSession(null);
	renderNav(signOut);
	const box = errorBox();
	const input = h("input", {
		id: "token",
		name: "token",
		type: "password",
		autocomplete: "current-password",
		required: true,
		spellcheck: "false",
	});
	const form = h(
		"form",
		{
			class: "card signin",
			"data-form": "token",
			onsubmit: async (ev) => {
				ev.preventDefault();
				sessionStorage.setItem(TOKEN_KEY, input.value.trim());
				try {
					await loadSession();
					route();
				} catch (e) {
					sessionStorage.removeItem(TOKEN_KEY);
					box.show(e.status === 401 ? new Error("That token was not accepted.") : e);
					input.focus();
				}
			},
		},
		h("h1", {}, "Sign in"),
		h("p", {}, "This node requires a credential. Enter a bearer token from its credentials file."),
		h("label", { for: "token" }, "Token"),
		input,
		h("button", { type: "submit" }, "Sign in"),
		box,
	);
	if (err && token()) box.show(new Error(`The stored token was refused: ${err.message}`));
	sessionStorage.removeItem(TOKEN_KEY);
	clear($("#main"), form);
	input.focus();
}

async function loadSession() {
	setSession(await api("session"));
	renderNav(signOut);
}

function signOut() {
	sessionStorage.removeItem(TOKEN_KEY);
	start();
}

async function start() {
	try {
		await loadSession();
	} catch (e) {
		if (e.status === 401) return showSignIn(e);
		const box = errorBox();
		box.show(e);
		clear(
			$("#main"),
			h("h1", {}, "Rebound"),
			box,
			h("button", { type: "button", onclick: start }, "Try again"),
		);
		return;
	}
	route();
}

function route() {
	if (!session) return;
	leavePage();
	markNav();
	const parts = (location.hash.replace(/^#\/?/, "") || "").split("/").map((p) => {
		try {
			return decodeURIComponent(p);
		} catch {
			return p; // a malformed escape (#/retry/%) is looked up as typed, not a dead page
		}
	});
	const [page, a, b] = parts;
	const main = $("#main");
	const admin = session.admin;
	let view;
	if (!page) view = overview();
	else if (page === "services" && admin) view = a ? servicePage(a) : servicePicker("services");
	else if (page === "dead-letters" && admin) view = a ? deadLettersPage(a) : servicePicker("dead-letters");
	else if (page === "retries" && (a || admin)) view = a ? retriesPage(a) : servicePicker("retries");
	else if (page === "retry") view = retryPage(a, parts.slice(2).join("/"));
	else if (page === "ring") view = ringPage();
	else if (page === "window" && admin) view = windowPage(a, b);
	else if (["services", "dead-letters", "window", "retries"].includes(page))
		view = h(
			"section",
			{},
			h("h1", {}, "Not available"),
			h("p", { class: "empty" }, "This page needs an admin credential."),
		);
	else view = h("section", {}, h("h1", {}, "Not found"), h("p", { class: "empty" }, "No such page."));
	clear(main, view);
}

onUnauthorized(showSignIn);
window.addEventListener("hashchange", () => {
	if (location.hash === "#main") return;
	route();
	$("#main").focus({ preventScroll: true });
});
document.addEventListener("click", (ev) => {
	const a = ev.target.closest?.("a.skip");
	if (!a) return;
	ev.preventDefault();
	$("#main").focus();
});
start();
