"""Errors: every failed call raises :class:`ReboundError` with the gRPC code and the server's
message (which names the field and the limit for bad input)."""

from __future__ import annotations

import grpc

#: Codes after which re-sending the same call is safe and may succeed: an enqueue is
#: idempotent by (service, transaction_id), so a repeat of an unknown outcome never doubles it.
RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)

_BY_VALUE = {c.value[0]: c for c in grpc.StatusCode}


def code_of(number: int) -> grpc.StatusCode:
    """The :class:`grpc.StatusCode` of a numeric google.rpc.Code (UNKNOWN when unknown)."""
    return _BY_VALUE.get(number, grpc.StatusCode.UNKNOWN)


class ReboundError(Exception):
    """A call the server (or the transport) refused or could not complete."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    @property
    def is_retryable(self) -> bool:
        """True for UNAVAILABLE, DEADLINE_EXCEEDED and RESOURCE_EXHAUSTED: the outcome of the
        call is unknown or the node is busy, and re-sending it is safe."""
        return self.code in RETRYABLE_CODES

    @classmethod
    def from_rpc(cls, e: grpc.RpcError) -> ReboundError:
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        details = e.details() if hasattr(e, "details") else str(e)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "")


class ItemError(ReboundError):
    """The error of one item of a batch: the status it would have had on its own."""
