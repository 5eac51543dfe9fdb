"""What the flush tests inject in place of the disk (a fake: a slow disk cannot be made here)."""

from __future__ import annotations

import time

import pytest

from cometmq.store._mappedfile import MappedFile


class InjectedCommitLogSync:
    """The commit log's sync, slowed: it sleeps ``delay`` seconds (which a test may change) before the
    real fdatasync, and records in ``calls`` the start offset of each segment it syncs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls: list[int] = []
        real_sync = MappedFile.sync

        def sync(mapped: MappedFile) -> None:
            if mapped.path.parent.name == "commitlog":
                self.calls.append(mapped.start)
                time.sleep(self.delay)
            real_sync(mapped)

        monkeypatch.setattr(MappedFile, "sync", sync)
