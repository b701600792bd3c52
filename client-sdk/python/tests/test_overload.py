"""The retry rule for calls a node sheds under load (no node needed)."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from rebound_client import _overload


class Failed(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, hint: str | None = None) -> None:
        self._code = code
        self._trailers = () if hint is None else (("grpc-retry-pushback-ms", hint),)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "full"

    def initial_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailers


SHED = grpc.StatusCode.RESOURCE_EXHAUSTED


def test_the_hint_is_followed_with_up_to_half_again() -> None:
    assert _overload.pushback(Failed(SHED, "250")) == 0.25
    assert _overload.wait_before(0, 0.25, 0.0) == 0.25
    assert _overload.wait_before(5, 0.25, 0.999) == pytest.approx(0.374875)
    # Malformed or negative hints are ignored: the backoff applies.
    for bad in ("-5", "soon", "", "1.5"):
        assert _overload.pushback(Failed(SHED, bad)) is None, bad
    assert _overload.pushback(Failed(SHED)) is None
    assert _overload.wait_before(0, None, 0.5) == pytest.approx(0.1)
    assert _overload.wait_before(3, None, 0.0) == pytest.approx(0.64)
    assert _overload.wait_before(3, None, 0.999) == pytest.approx(0.95968)
    assert _overload.wait_before(20, None, 0.5) == pytest.approx(5.0)


def calls_of(answers: list[Any]) -> tuple[Any, list[int]]:
    made: list[int] = []

    def fn() -> Any:
        made.append(1)
        a = answers[min(len(made), len(answers)) - 1]
        if isinstance(a, Exception):
            raise a
        return a

    return fn, made


def test_a_shed_call_is_made_again_and_other_errors_are_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    fn, made = calls_of([Failed(SHED, "10"), Failed(SHED), 7])
    assert _overload.call(fn, retries=9) == 7
    assert len(made) == 3 and 0.01 <= slept[0] < 0.015 and 0.16 <= slept[1] < 0.24

    fn, made = calls_of([Failed(grpc.StatusCode.UNAVAILABLE)])
    with pytest.raises(Failed):
        _overload.call(fn, retries=9)
    assert len(made) == 1

    # Shed every time: given up after the bound, with the node's error.
    fn, made = calls_of([Failed(SHED, "250")])
    with pytest.raises(Failed) as e:
        _overload.call(fn, retries=9)
    assert e.value.code() == SHED and len(made) == 10
    fn, made = calls_of([Failed(SHED, "250")])
    with pytest.raises(Failed):
        _overload.call(fn, retries=0)
    assert len(made) == 1
    # No wait past the deadline, nor beyond 30 s in all.
    fn, made = calls_of([Failed(SHED, "250")])
    with pytest.raises(Failed):
        _overload.call(fn, retries=9, deadline=time.monotonic() + 0.2)
    assert len(made) == 1
    fn, made = calls_of([Failed(SHED, "20000")])
    with pytest.raises(Failed):
        _overload.call(fn, retries=9)
    assert len(made) == 2


async def test_the_executor_side_retries_too() -> None:
    made: list[int] = []

    async def fn() -> str:
        made.append(1)
        if len(made) < 3:
            raise Failed(SHED, "0")
        return "acked"

    assert await _overload.acall(fn, retries=9) == "acked"
    assert len(made) == 3
