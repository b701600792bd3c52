"""The examples, each run as its own process against a live node."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import Node

SDK = Path(__file__).resolve().parents[1]


def test_saga_example(node: Node) -> None:
    env = {**os.environ, "PYTHONPATH": str(SDK / "src")}
    r = subprocess.run(
        [sys.executable, str(SDK / "examples/saga.py"), node.address],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.stdout.splitlines()[-1].endswith("saga compensated"), r.stdout
