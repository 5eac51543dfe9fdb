"""The committed protobuf and gRPC code is what scripts/generate-grpc.sh makes of the .proto files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "src" / "cometmq" / "proxy" / "_pb"


def test_committed_code_matches_the_protos(tmp_path: Path) -> None:
    subprocess.run(
        [str(ROOT / "scripts" / "generate-grpc.sh"), str(tmp_path)],
        check=True,
        env={**os.environ, "PY": sys.executable},
    )
    made = sorted(path.name for path in tmp_path.iterdir())
    committed = sorted(path.name for path in GENERATED.iterdir() if path.is_file())
    assert made == committed
    for name in made:
        assert (tmp_path / name).read_text() == (GENERATED / name).read_text(), f"{name} differs: regenerate"
