#!/usr/bin/env bash
# Start a standalone CometMQ (NameServer on 9876 + Broker on 10911, data in ~/.cometmq/data; dashboard on 8082,
# metrics on 5557).
# Extra arguments go to `cometmq standalone`, e.g. ./run.sh --data-dir /tmp/cometmq
# ./run.sh cluster [ARGS] runs `cometmq cluster up [ARGS]` instead: masters with slaves, one process each;
# ./run.sh cluster --etcd also starts an etcd, through which each group elects its master.
source "$(dirname "$0")/scripts/_venv.sh" ""
if [ "${1:-}" = cluster ]; then
  shift
  exec "$VENV/bin/cometmq" cluster up "$@"
fi
exec "$VENV/bin/cometmq" standalone "$@"
