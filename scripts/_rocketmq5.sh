# Sourced by test.sh after _venv.sh: make sure .venv-rocketmq5 holds the official RocketMQ 5.x Python client,
# which tests/rocketmq5 runs in subprocesses against CometMQ's proxy. It has a venv of its own: its top-level
# package `rocketmq` is also the name of the C++ 4.x client's package that .venv holds for tests/interop.
ROCKETMQ5_CLIENT_VERSION="5.1.2"
ROCKETMQ5_VENV="$ROOT/.venv-rocketmq5"

# Ready when the venv's installed client is the pinned version (changing the pin installs again).
cometmq_rocketmq5_ready() {
  [ -x "$ROCKETMQ5_VENV/bin/python" ] && "$ROCKETMQ5_VENV/bin/python" -c \
    "import importlib.metadata as m, sys; sys.exit(m.version('rocketmq-python-client') != '$ROCKETMQ5_CLIENT_VERSION')" \
    2>/dev/null
}

cometmq_rocketmq5_install() {
  local python
  python="$(command -v python3.11 || command -v python3)"
  if [ ! -x "$ROCKETMQ5_VENV/bin/python" ]; then
    echo "cometmq: creating $ROCKETMQ5_VENV with $python" >&2
    "$python" -m venv "$ROCKETMQ5_VENV"
  fi
  echo "cometmq: installing rocketmq-python-client $ROCKETMQ5_CLIENT_VERSION into $ROCKETMQ5_VENV" >&2
  "$ROCKETMQ5_VENV/bin/python" -m pip install --quiet --upgrade pip
  "$ROCKETMQ5_VENV/bin/python" -m pip install --quiet "rocketmq-python-client==$ROCKETMQ5_CLIENT_VERSION"
}

# The same lock discipline as _venv.sh: taken only when something is missing, checked again once held.
if ! cometmq_rocketmq5_ready; then
  (
    if command -v flock >/dev/null; then
      if ! flock --nonblock 9; then
        echo "cometmq: waiting for another ./test.sh to finish installing into $ROCKETMQ5_VENV" >&2
        flock 9
      fi
    fi
    if ! cometmq_rocketmq5_ready; then
      cometmq_rocketmq5_install
    fi
  ) 9>"$ROOT/.venv-rocketmq5.lock"
fi
