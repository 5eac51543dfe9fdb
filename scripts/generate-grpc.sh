#!/usr/bin/env bash
# Generates the proxy's Python protobuf and gRPC code from the .proto files in
# src/cometmq/proxy/protos into src/cometmq/proxy/_pb (or into the directory given as $1), with the
# grpcio-tools of the `test` extra. protoc names modules after the .proto paths (apache.rocketmq.v2.*);
# they are moved flat into _pb and their imports pointed at cometmq.proxy._pb, so no top-level `apache`
# package is installed beside the official RocketMQ clients'. tests/proxy/test_generated.py checks the
# committed code is what this script writes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
PROTOS="$ROOT/src/cometmq/proxy/protos"
OUT="${1:-$ROOT/src/cometmq/proxy/_pb}"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PY" -m grpc_tools.protoc -I "$PROTOS" --python_out="$WORK" --pyi_out="$WORK" --grpc_python_out="$WORK" \
  apache/rocketmq/v2/definition.proto apache/rocketmq/v2/service.proto

mkdir -p "$OUT"
rm -f "$OUT"/*_pb2*.py "$OUT"/*_pb2*.pyi
# definition.proto declares no service: its empty *_grpc module is left out.
for generated in definition_pb2.py definition_pb2.pyi service_pb2.py service_pb2.pyi service_pb2_grpc.py; do
  sed -e 's/^from apache\.rocketmq\.v2 import /from cometmq.proxy._pb import /' \
    "$WORK/apache/rocketmq/v2/$generated" > "$OUT/$generated"
done
printf '"""Code generated from src/cometmq/proxy/protos by scripts/generate-grpc.sh: do not edit."""\n' \
  > "$OUT/__init__.py"
