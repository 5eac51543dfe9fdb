#!/usr/bin/env bash
# Run the whole test suite (lint, type check, unit, broker, interop with the C++ client, CLI).
# Extra arguments go to pytest, e.g. ./test.sh tests/remoting -x
source "$(dirname "$0")/scripts/_venv.sh" test,spark
source "$(dirname "$0")/scripts/_rocketmq5.sh"
source "$(dirname "$0")/scripts/_etcd.sh"
source "$(dirname "$0")/scripts/_chromium.sh"
cd "$ROOT"
"$VENV/bin/python" -m ruff check src tests bench
"$VENV/bin/python" -m mypy
exec "$VENV/bin/python" -m pytest "$@"
