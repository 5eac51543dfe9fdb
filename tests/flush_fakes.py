"""What the flush tests inject in place of the disk (a fake: a slow disk cannot be made here)."""

from __future__ import annotations

import threading
import time

import pytest

from cometmq.store._mappedfile import MappedFile


class InjectedCommitLogSync:
    """The commit log's sync, slowed: it sleeps ``delay`` seconds (which a test may change) before the
    real fdatasync, and records in ``calls`` the start offset of each segment it syncs. Between
    :meth:`hang` and :meth:`release` every sync waits, as on a disk that does not answer."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls: list[int] = []
        self._answering = threading.Event()
        self._answering.set()
        real_sync = MappedFile.sync

        def sync(mapped: MappedFile) -> None:
            if mapped.path.parent.name == "commitlog":
                self.calls.append(mapped.start)
                self._answering.wait()
                time.sleep(self.delay)
            real_sync(mapped)

        monkeypatch.setattr(MappedFile, "sync", sync)

    def hang(self) -> None:
        self._answering.clear()

    def release(self) -> None:
        self._answering.set()
