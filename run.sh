#!/usr/bin/env bash
# Start a standalone CometMQ (NameServer on 9876 + Broker on 10911, data in ~/.cometmq/data).
# Extra arguments go to `cometmq standalone`, e.g. ./run.sh --data-dir /tmp/cometmq
source "$(dirname "$0")/scripts/_venv.sh" ""
exec "$VENV/bin/cometmq" standalone "$@"
