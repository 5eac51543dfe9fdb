# Sourced by run.sh and test.sh: make sure .venv exists and holds CometMQ with the given extras.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${1:-}"
STAMP="$VENV/.installed${EXTRAS:+-$EXTRAS}"

cometmq_venv_ready() {
  [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ ! "$ROOT/pyproject.toml" -nt "$STAMP" ]
}

cometmq_venv_install() {
  local python
  python="$(command -v python3.11 || command -v python3)"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "cometmq: creating $VENV with $python" >&2
    "$python" -m venv "$VENV"
  fi
  echo "cometmq: installing dependencies into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
  touch "$STAMP"
}

# ./run.sh and ./test.sh started together on a fresh clone would both create and fill the same .venv
# (and break each other's pip): the setup runs under an exclusive lock, taken only when something is
# missing, and released before the caller runs anything. Whoever gets the lock second checks its own
# extras again, since the first may have installed only its own. Without flock (not on macOS by
# default) the setup runs unlocked.
if ! cometmq_venv_ready; then
  (
    if command -v flock >/dev/null; then
      if ! flock --nonblock 9; then
        echo "cometmq: waiting for another ./run.sh or ./test.sh to finish installing into $VENV" >&2
        flock 9
      fi
    fi
    if ! cometmq_venv_ready; then
      cometmq_venv_install
    fi
  ) 9>"$ROOT/.venv.lock"
fi
