"""Loading and saving the broker's JSON metadata files under ``<data-dir>/config``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from cometmq.atomic_file import read_with_backup, write_atomic
from cometmq.protocol import fastjson

log = logging.getLogger("cometmq.broker")


def load_json_config(path: Path) -> dict[str, Any] | None:
    """The parsed file, or its ``.bak`` when the file is corrupt; None when neither exists."""
    for candidate, data in read_with_backup(path):
        try:
            obj = fastjson.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            log.error("%s is corrupt (%s); trying its backup", candidate, exc)
            continue
        if isinstance(obj, dict):
            if candidate != path:
                log.warning("loaded %s from its backup %s", path.name, candidate)
            return obj
        log.error("%s does not hold a JSON object; trying its backup", candidate)
    return None


def save_json_config(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True).encode())
