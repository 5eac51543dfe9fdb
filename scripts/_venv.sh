# Sourced by run.sh and test.sh: make sure .venv exists and holds CometMQ with the given extras.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${1:-}"
PYTHON="$(command -v python3.11 || command -v python3)"
if [ ! -x "$VENV/bin/python" ]; then
  echo "cometmq: creating $VENV with $PYTHON" >&2
  "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.installed${EXTRAS:+-$EXTRAS}"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  echo "cometmq: installing dependencies into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
  touch "$STAMP"
fi
