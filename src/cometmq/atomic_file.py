"""Crash-safe replacement of small metadata files (topics.json, consumerOffset.json, …)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("cometmq.config")


def write_atomic(path: Path, data: bytes, *, mode: int = 0o666) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content.

    The previous content is kept as ``<name>.bak`` (RocketMQ's convention), the new one is written
    to a temp file, fsynced, and renamed over the old; then the directory is fsynced. The temp file is
    created with *mode* (less the umask): a file of secrets is never readable by others, not even
    for a moment.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # one a crash left keeps its mode; a new one gets *mode*
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        # A full disk: what was written of it would only take room the next attempt needs.
        tmp.unlink(missing_ok=True)
        raise
    if path.exists():
        # A hard link keeps the old content as .bak while ``path`` itself never goes missing.
        backup = path.with_name(path.name + ".bak")
        backup.unlink(missing_ok=True)
        os.link(path, backup)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_with_backup(path: Path) -> list[tuple[Path, bytes]]:
    """The candidate contents of ``path`` in the order to try them: the file, then its ``.bak``."""
    candidates = []
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            candidates.append((candidate, candidate.read_bytes()))
        except FileNotFoundError:
            continue
    return candidates
