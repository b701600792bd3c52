"""Calls a node shed under load.

A node whose request byte budget (``REBOUND_MAX_INFLIGHT_BYTES``) is full answers a unary call
RESOURCE_EXHAUSTED before it decodes the request, so the call did nothing and is safe to make
again; the answer carries a ``grpc-retry-pushback-ms`` hint. Such a call is made again after
the hint times a jitter factor in [1, 1.5) (without a valid hint: 100 ms, x2 per retry, capped
at 5 s, +/-20 %), at most ``retries`` more times, at most :data:`MAX_WAIT` seconds of waiting in
all, and never past the call's deadline; then the caller gets the RESOURCE_EXHAUSTED as
before. No other code is retried here.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import grpc

T = TypeVar("T")

#: Retries of one call while the node sheds it, by default (ten calls in all).
DEFAULT_RETRIES = 9
#: Most seconds spent waiting between the calls of one request.
MAX_WAIT = 30.0
PUSHBACK_KEY = "grpc-retry-pushback-ms"
_DIGITS = re.compile(r"[0-9]+")


def _code(e: grpc.RpcError) -> Any:
    code = getattr(e, "code", None)
    return code() if callable(code) else None


def pushback(e: grpc.RpcError) -> float | None:
    """The node's ``grpc-retry-pushback-ms`` hint of a failed call, in seconds; None when there
    is none or it is not an integer of at least 0."""
    for name in ("trailing_metadata", "initial_metadata"):
        get = getattr(e, name, None)
        pairs: Iterable[tuple[str, Any]] | None = get() if callable(get) else None
        for key, value in pairs or ():
            if key.lower() != PUSHBACK_KEY:
                continue
            text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
            text = text.strip()
            return int(text) / 1000 if _DIGITS.fullmatch(text) else None
    return None


def wait_before(retry: int, hint: float | None, unit: float | None = None) -> float:
    """Seconds to wait before retry number ``retry`` (0 for the first) of a shed call:
    ``hint`` times [1, 1.5), or without one 100 ms x 2**retry, capped at 5 s, +/-20 %.
    ``unit``: the jitter draw in [0, 1) (random when None)."""
    u = random.random() if unit is None else unit
    if hint is not None:
        return hint * (1 + 0.5 * u)
    return min(5.0, 0.1 * 2.0 ** min(retry, 30)) * (0.8 + 0.4 * u)


class Overload:
    """The retries of one call while the node sheds it."""

    def __init__(self, retries: int, deadline: float | None = None) -> None:
        #: Most retries; ``deadline``: a :func:`time.monotonic` time no wait may reach.
        self.retries = retries
        self.deadline = deadline
        self.retry = 0
        self.waited = 0.0

    def wait(self, e: grpc.RpcError) -> float | None:
        """How long to wait before calling again after ``e``; None: give up, raise ``e``."""
        if _code(e) != grpc.StatusCode.RESOURCE_EXHAUSTED or self.retry >= self.retries:
            return None
        w = wait_before(self.retry, pushback(e))
        if self.waited + w > MAX_WAIT:
            return None
        if self.deadline is not None and time.monotonic() + w >= self.deadline:
            return None
        self.retry += 1
        self.waited += w
        return w


def call(fn: Callable[[], T], *, retries: int, deadline: float | None = None) -> T:
    """``fn()``, made again while the node sheds it (blocking)."""
    o = Overload(retries, deadline)
    while True:
        try:
            return fn()
        except grpc.RpcError as e:
            w = o.wait(e)
            if w is None:
                raise
            time.sleep(w)


async def acall(
    fn: Callable[[], Awaitable[T]], *, retries: int, deadline: float | None = None
) -> T:
    """``await fn()``, made again while the node sheds it."""
    o = Overload(retries, deadline)
    while True:
        try:
            return await fn()
        except grpc.RpcError as e:
            w = o.wait(e)
            if w is None:
                raise
            await asyncio.sleep(w)
