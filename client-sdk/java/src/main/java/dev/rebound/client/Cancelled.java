package dev.rebound.client;

import dev.rebound.v1.RetryStatus;

/**
 * The answer to a cancel.
 *
 * @param status CANCELLED, or the terminal status the retry already had
 * @param cancelled false when the retry had already finished before this call
 */
public record Cancelled(RetryStatus status, boolean cancelled) {}
