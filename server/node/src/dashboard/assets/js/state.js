// What the pages share: the session, and what leaving the current page stops.

/** The answer of GET /api/v1/session; null until signed in. */
export let session = null;

export function setSession(s) {
	session = s;
}

/** Called when the page is left: stops its timers. */
let leave = () => {};

/** Adds fn to what leaving the current page runs (after what was added before). */
export function onLeave(fn) {
	const prev = leave;
	leave = () => {
		prev();
		fn();
	};
}

/** Leaves the current page: runs what onLeave added, then forgets it. */
export function leavePage() {
	leave();
	leave = () => {};
}
