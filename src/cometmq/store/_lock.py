"""The exclusive lock that keeps a store directory to one running ``MessageStore``.

RocketMQ's store locks ``<storePathRootDir>/lock`` for the same reason: a second broker on the same
directory would run recovery on files the first is still appending to, and truncate messages the
first has already acknowledged.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from cometmq.errors import StoreInUseError

__all__ = ["StoreDirectoryLock"]


class StoreDirectoryLock:
    """``flock`` on ``<root>/lock``, whose content is the holder's pid.

    ``flock``, not ``fcntl``'s record locks: a record lock belongs to the process, so a second store
    in the same process would be granted it (and closing either descriptor would drop it), while a
    ``flock`` belongs to one open file and refuses every other open. The kernel drops it when the
    process dies, so a kill -9 leaves no stale lock behind, only a stale pid in the file.
    """

    def __init__(self, root: Path) -> None:
        self.path = root / "lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`StoreInUseError` naming the holder; idempotent."""
        if self._fd is not None:
            return
        # No O_TRUNC: until the lock is ours, the file holds the holder's pid.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreInUseError(self.path.parent, _read_pid(fd)) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)  # and with it the lock, if it was taken
            raise
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (the file stays: removing it would race with a process opening it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> int | None:
    """The pid in the lock file; None while its holder has not written it yet."""
    text = os.pread(fd, 32, 0)
    return int(text) if text.strip().isdigit() else None
