"""The checked-in gRPC modules match proto/*.proto (``scripts/gen_proto.py --check``).

Fails when someone edits a .proto file without running ``make proto``: the generated
``*_pb2.py``/``*_pb2_grpc.py``/``*.pyi`` would then describe another protocol than the source.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_modules_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        f"scripts/gen_proto.py --check exited {result.returncode}; run `make proto`\n"
        f"{result.stdout}{result.stderr}"
    )
    assert "generated modules are current" in result.stdout
