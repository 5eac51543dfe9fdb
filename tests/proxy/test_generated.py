"""The committed protobuf and gRPC code is what scripts/generate-grpc.sh makes of the .proto files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
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


def test_pinned_versions_are_those_the_generated_code_names() -> None:
    """grpcio-tools writes its own version into the code (so only the pinned one makes the committed
    code), and the code refuses a grpcio or protobuf older than the versions it names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    grpc_code = (GENERATED / "service_pb2_grpc.py").read_text()
    grpc_version = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", grpc_code)
    assert grpc_version is not None
    protobuf_code = (GENERATED / "definition_pb2.py").read_text()
    protobuf_version = re.search(r"Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", protobuf_code)
    assert protobuf_version is not None
    assert f"grpcio-tools=={grpc_version[1]}" in requirements
    assert f"grpcio>={grpc_version[1]}" in requirements
    assert f"protobuf>={'.'.join(protobuf_version.groups())}" in requirements
