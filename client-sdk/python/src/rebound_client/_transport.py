"""Channels: plain text or TLS (optionally with a client certificate), and the metadata every
call carries (a bearer token, and the caller's W3C trace context)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

Metadata = tuple[tuple[str, str], ...]

#: Messages up to this size both ways (a batch of large payloads).
_OPTIONS = [
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
]


@dataclass(frozen=True)
class Tls:
    """TLS for a node's gRPC port. ``ca_file``: PEM roots to trust (``None``: the system's);
    ``cert_file`` and ``key_file``: a client certificate for mutual TLS; ``server_name``: the
    name to verify when it differs from the address's host."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls: cert_file and key_file go together")
        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )


def target(address: str, tls: Tls | None) -> tuple[str, Tls | None]:
    """The gRPC target of ``address`` (``host:port``, ``http://host:port`` or
    ``https://host:port``; https implies TLS with the system's roots)."""
    if address.startswith("https://"):
        return address[len("https://") :].rstrip("/"), tls or Tls()
    if address.startswith("http://"):
        return address[len("http://") :].rstrip("/"), tls
    return address, tls


def _options(tls: Tls | None) -> list[tuple[str, Any]]:
    opts: list[tuple[str, Any]] = list(_OPTIONS)
    if tls is not None and tls.server_name:
        opts.append(("grpc.ssl_target_name_override", tls.server_name))
    return opts


def sync_channel(address: str, tls: Tls | None) -> grpc.Channel:
    t, tls = target(address, tls)
    if tls is None:
        return grpc.insecure_channel(t, options=_options(None))
    return grpc.secure_channel(t, tls.credentials(), options=_options(tls))


def aio_channel(address: str, tls: Tls | None) -> grpc.aio.Channel:
    t, tls = target(address, tls)
    if tls is None:
        return grpc.aio.insecure_channel(t, options=_options(None))
    return grpc.aio.secure_channel(t, tls.credentials(), options=_options(tls))


def auth_metadata(token: str | None) -> Metadata:
    return () if not token else (("authorization", f"Bearer {token}"),)


def trace_metadata() -> Metadata:
    """The current W3C trace context (``traceparent``, ``tracestate``) when the OpenTelemetry
    API is installed and a span is active; nothing otherwise."""
    try:
        from opentelemetry import propagate
    except ImportError:
        return ()
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple((k, carrier[k]) for k in ("traceparent", "tracestate") if carrier.get(k))
