"""Regenerate proto/*_pb2.py, *_pb2_grpc.py and *.pyi from proto/*.proto.

Run from anywhere: ``python scripts/gen_proto.py``. ``--check`` regenerates into a temporary
directory and exits 1 when a checked-in module differs (tests/unit/test_proto_current.py).
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"


def generate(out_root: Path) -> list[Path]:
    """Generate every module under out_root/proto and return the generated paths."""
    (out_root / "proto").mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).resolve().parent / "_proto"
    sources = sorted(PROTO_DIR.glob("*.proto"))
    for src in sources:
        rel = src.relative_to(ROOT)
        rc = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{ROOT}",
                f"-I{include}",
                f"--python_out={out_root}",
                f"--pyi_out={out_root}",
                f"--grpc_python_out={out_root}",
                str(rel),
            ]
        )
        if rc != 0:
            raise SystemExit(f"protoc failed on {rel} (exit {rc})")
    generated = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
    return sorted(p for p in (out_root / "proto").iterdir() if p.name.endswith(generated))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if checked-in modules are stale")
    args = parser.parse_args()
    import os

    os.chdir(ROOT)
    if not args.check:
        for path in generate(ROOT):
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        stale = []
        for fresh in generate(Path(tmp)):
            current = PROTO_DIR / fresh.name
            if not current.exists() or not filecmp.cmp(fresh, current, shallow=False):
                stale.append(current.name)
        if stale:
            print("stale generated modules: " + ", ".join(stale) + " (run scripts/gen_proto.py)")
            return 1
    print("generated modules are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
