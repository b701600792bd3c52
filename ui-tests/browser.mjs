// What the browser tests and the cost measurement share: their settings from scripts/test-ui
// and the way Chromium is started.
import { chromium } from "playwright-core";

/** A setting scripts/test-ui exports; throws naming it when it is missing. */
export function env(name) {
	const v = process.env[name];
	if (!v) throw new Error(`${name} is not set: run this through scripts/test-ui`);
	return v;
}

/**
 * Debian's Chromium, headless, without the background connections this machine's closed network
 * refuses.
 */
export function launchChromium() {
	return chromium.launch({
		executablePath: env("REBOUND_CHROMIUM"),
		headless: true,
		args: [
			"--no-sandbox",
			"--disable-gpu",
			"--disable-quic",
			"--no-first-run",
			"--disable-background-networking",
			"--disable-component-update",
			"--disable-sync",
		],
	});
}
