"""A live Rebound node per test: the repository's rebound-server binary, started as a process
against the Cassandra that scripts/cassandra runs (127.0.0.1:9042, or
$REBOUND_CASSANDRA_CONTACT_POINTS), with a keyspace of its own and 1 s windows."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SERVER = Path(os.environ.get("REBOUND_SERVER_BIN", REPO / "target/debug/rebound-server"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Node:
    """One rebound-server process. Several nodes share a keyspace to form one ring."""

    def __init__(self, keyspace: str, node_id: str, tmp: Path, **env: str) -> None:
        self.keyspace = keyspace
        self.log = tmp / f"{node_id}.log"
        # A port found free can be taken before the node binds it (by any outgoing
        # connection, which draws from the same range): start again on another one.
        for _ in range(5):
            if self._start(node_id, env):
                return
        raise RuntimeError(f"rebound-server found no free port: {self.log.read_text()[-2000:]}")

    def _start(self, node_id: str, env: dict[str, str]) -> bool:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        full = {
            **os.environ,
            "REBOUND_LISTEN": self.address,
            "REBOUND_KEYSPACE": self.keyspace,
            "REBOUND_NODE_ID": node_id,
            "REBOUND_WINDOW_SECONDS": "1",
            "REBOUND_SKEW_MARGIN_MS": "200",
            "REBOUND_SCAN_INTERVAL_MS": "50",
            "REBOUND_COMPACTION_INTERVAL_MS": "200",
            "REBOUND_SLOTS": "8",
            "REBOUND_LEASE_TTL_MS": "3000",
            "REBOUND_LANES": "2",
            "REBOUND_SHUTDOWN_GRACE_MS": "1000",
            "RUST_LOG": os.environ.get("RUST_LOG", "warn"),
            **env,
        }
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(SERVER)], env=full, stdout=out, stderr=out)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                text = self.log.read_text()
                if "Address already in use" in text:
                    return False
                raise RuntimeError(f"rebound-server exited: {text[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return True
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"rebound-server did not listen on {self.address}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.keyspace = "sdk_py_" + uuid.uuid4().hex[:12]
        self.nodes: list[Node] = []

    def start(self, node_id: str | None = None, **env: str) -> Node:
        node = Node(self.keyspace, node_id or f"py-{len(self.nodes)}", self.tmp, **env)
        self.nodes.append(node)
        return node

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if not SERVER.exists():
        pytest.fail(f"{SERVER} is missing: build it with cargo build -p rebound-server")
    c = Cluster(tmp_path)
    yield c
    c.stop()


@pytest.fixture
def node(cluster: Cluster) -> Node:
    return cluster.start()


def credentials_file(tmp: Path, entries: list[tuple[str, str, list[str], bool]]) -> Path:
    """A credentials file: (name, token, services, admin) per entry."""
    text = ""
    for name, token, services, admin in entries:
        digest = hashlib.sha256(token.encode()).hexdigest()
        quoted = ", ".join(f'"{s}"' for s in services)
        text += (
            f'[[credential]]\nname = "{name}"\ntoken_sha256 = "{digest}"\n'
            f"services = [{quoted}]\nadmin = {'true' if admin else 'false'}\n\n"
        )
    path = tmp / "credentials.toml"
    path.write_text(text)
    return path


def make_certs(tmp: Path) -> Path:
    """The certificates of scripts/test-certs (a CA, node.pem, client.pem with CN=sdk-client,
    other-ca.pem), written into ``tmp/certs``."""
    out = tmp / "certs"
    subprocess.run([str(REPO / "scripts/test-certs"), str(out)], check=True)
    return out
