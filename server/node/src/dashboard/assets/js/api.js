// The JSON API under /api/v1/ (docs/dashboard.md): fetch with the stored bearer token, errors as
// ApiError with the server's code and message.

export const TOKEN_KEY = "rebound.token";

class ApiError extends Error {
	constructor(status, code, message) {
		super(message);
		this.status = status;
		this.code = code;
	}
}

export function token() {
	return sessionStorage.getItem(TOKEN_KEY);
}

let unauthorized = () => {};

/** What a 401 answer (to any call but the session's) does: app.js shows the sign-in form. */
export function onUnauthorized(fn) {
	unauthorized = fn;
}

export async function api(path, body) {
	const headers = { Accept: "application/json" };
	const t = token();
	if (t) headers.Authorization = `Bearer ${t}`;
	const init = { headers, cache: "no-store" };
	if (body !== undefined) {
		init.method = "POST";
		headers["Content-Type"] = "application/json";
		init.body = JSON.stringify(body);
	}
	let res;
	try {
		res = await fetch(`/api/v1/${path}`, init);
	} catch (e) {
		// A write whose connection broke may have been applied: say so, never "nothing written".
		if (body !== undefined)
			throw new ApiError(
				0,
				"DEADLINE_EXCEEDED",
				`no answer from the node (${e.message}): the change may or may not have been made; reload to see, it is safe to repeat`,
			);
		throw new ApiError(0, "UNAVAILABLE", `the node did not answer (${e.message})`);
	}
	const text = await res.text();
	let data = null;
	try {
		data = text ? JSON.parse(text) : null;
	} catch {
		data = null;
	}
	if (!res.ok) {
		const message = data?.message ?? (text.trim() || `HTTP ${res.status}`);
		const err = new ApiError(res.status, data?.code ?? "", message);
		if (res.status === 401 && path !== "session") unauthorized(err);
		throw err;
	}
	return data;
}

export const enc = encodeURIComponent;

export function errorText(e) {
	if (e instanceof ApiError) return e.code ? `${e.message} (${e.code})` : e.message;
	return e?.message ?? String(e);
}
