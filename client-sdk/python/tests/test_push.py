"""Push delivery checked as a user's endpoint would check it: every request a live node
pushes verifies with the official Standard Webhooks library (``standardwebhooks`` from PyPI),
and a tampered body or an old timestamp is refused by that library."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from conftest import Cluster
from google.protobuf import duration_pb2
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from rebound.v1 import admin_pb2, admin_pb2_grpc
from rebound_client import Client, RetryStatus

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NEXT_SECRET = "whsec_bmV4dCBzZWNyZXQgb2YgdGhlIHJvdGF0aW9uIDEyMzQ1"


class Receiver:
    """Records every POST (headers, body) and answers 200."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        received = self.got

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_pushes_verify_with_the_standard_webhooks_library(
    cluster: Cluster, receiver: Receiver
) -> None:
    node = cluster.start(REBOUND_PUSH_ALLOW="127.0.0.1")
    with grpc.insecure_channel(node.address) as ch:
        admin = admin_pb2_grpc.AdminServiceStub(ch)  # type: ignore[no-untyped-call]
        admin.SetPushTarget(
            admin_pb2.SetPushTargetRequest(
                service="orders",
                target=admin_pb2.PushTarget(
                    url=f"http://127.0.0.1:{receiver.port}/webhooks",
                    timeout=duration_pb2.Duration(seconds=5),
                    signing_secrets=[SECRET, NEXT_SECRET],
                ),
            ),
            timeout=10,
        )
    with Client(node.address) as c:
        for i in range(3):
            c.enqueue(
                "orders",
                f"order-{i}",
                payload=json.dumps({"order": i}).encode(),
                attributes={"content-type": "application/json"},
                delay=0,
            )
        deadline = time.time() + 30
        while time.time() < deadline:
            if all(c.get("orders", f"order-{i}").status == RetryStatus.SUCCEEDED for i in range(3)):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"pushes not all acknowledged: {len(receiver.got)} received")

    assert len(receiver.got) == 3
    for headers, body in receiver.got:
        # Either secret verifies (rotation): the request carries a signature for each.
        for secret in (SECRET, NEXT_SECRET):
            payload = Webhook(secret).verify(body, headers)
            assert payload["order"] in (0, 1, 2)
        assert headers["content-type"] == "application/json"
        assert headers["webhook-id"] == headers["rebound-delivery-id"]
        # A tampered body is refused by the library.
        with pytest.raises(WebhookVerificationError):
            Webhook(SECRET).verify(body + b" ", headers)
        # So is a request replayed ten minutes later (its timestamp is too old).
        old = dict(headers, **{"webhook-timestamp": str(int(time.time()) - 600)})
        with pytest.raises(WebhookVerificationError):
            Webhook(SECRET).verify(body, old)
        # And a secret the target does not hold.
        with pytest.raises(WebhookVerificationError):
            Webhook("whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY").verify(body, headers)
