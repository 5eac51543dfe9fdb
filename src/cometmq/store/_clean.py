"""Retention and the disk guard (RocketMQ's CleanCommitLogService and CleanConsumeQueueService).

One pass (``CleanService.run``, on the writer's thread) measures the disk, deletes expired commit-log
segments, then the consume-queue and index files that point only into deleted segments, and moves
every queue's min offset. The ``DiskGuard`` refuses writes while the disk is nearly full.

Deleting never closes a file here: the deleted files are unlinked at once (their blocks are freed
when the last descriptor and mapping go) and handed to the flush thread (``FlushService.retire``),
which closes them between two syncs. The lists the flush thread iterates are replaced, not mutated
(``CommitLog.drop_head``, ``ConsumeQueue.drop_head``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from ._batchqueue import BatchConsumeQueue
from ._commitlog import CommitLog
from ._consumequeue import QueueTable
from ._mappedfile import MappedFile, unlink_oldest_first
from ._model import StoreConfig

__all__ = ["CleanReport", "CleanService", "DiskGuard", "disk_usage_ratio", "parse_delete_when"]

log = logging.getLogger("cometmq.store")

DiskUsageProbe = Callable[[Path], float]
Retire = Callable[[list[MappedFile]], None]

_HOUR_MS: Final = 3_600_000


class IndexFiles(Protocol):
    """What a pass needs of the index service: drop index files holding only offsets below the
    commit log's new start."""

    def delete_files_before(self, commitlog_min_offset: int) -> int: ...


def disk_usage_ratio(path: Path) -> float:
    """Used fraction of the filesystem holding *path*, as ``df`` computes Use% (and RocketMQ its
    disk ratio): used / (used + available to unprivileged users), so the root reserve counts as
    used."""
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    entire = used + st.f_bavail
    return used / entire if entire > 0 else -1.0


def parse_delete_when(spec: str) -> frozenset[int]:
    """RocketMQ's ``deleteWhen``: hours of the day, ";"-separated (``"04"``, ``"04;16"``)."""
    hours = set()
    for token in spec.split(";"):
        token = token.strip()
        if not token.isdigit() or not 0 <= int(token) <= 23:
            raise ValueError(f"bad hour {token!r} in deleteWhen {spec!r} (want hours 0-23, ';'-separated)")
        hours.add(int(token))
    return frozenset(hours)


def _clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


@dataclass(slots=True)
class CleanReport:
    """What one pass saw and did."""

    disk_ratio: float  # used fraction of the store's filesystem; -1 when it could not be measured
    time_up: bool  # the local hour is one of deleteWhen's
    space_to_delete: bool  # usage above diskMaxUsedSpaceRatio (or unknown): expired files go now
    forced: bool  # usage above the force-clean level: segments went regardless of age
    writes_refused: bool  # the disk guard refuses writes after this pass
    commitlog_min_offset: int
    commitlog_deleted: list[Path] = field(default_factory=list)
    consumequeue_deleted: list[Path] = field(default_factory=list)
    index_files_deleted: int = 0


class DiskGuard:
    """Measures the disk and decides whether writes are refused (above the warning level)."""

    def __init__(self, root: Path, config: StoreConfig) -> None:
        self.root = root
        self._probe: DiskUsageProbe = config.disk_usage_probe or disk_usage_ratio
        # Clamped as RocketMQ clamps them: the levels can be lowered, never raised past 90 / 85 %.
        self.warning_level = _clamp(config.disk_space_warning_level_ratio / 100, 0.35, 0.90)
        self.force_level = _clamp(config.disk_space_clean_forcibly_ratio / 100, 0.30, 0.85)
        self.max_used = _clamp(config.disk_max_used_space_ratio, 10, 95) / 100
        self.refusal: str | None = None  # why writes are refused; None while they are accepted

    def measure(self) -> float:
        """The used fraction now; -1 (logged) when it cannot be measured."""
        try:
            return float(self._probe(self.root))
        except OSError as exc:
            log.warning("cannot measure the disk usage of %s: %s", self.root, exc)
            return -1.0

    def check(self) -> float:
        """Measure and update ``refusal``; log entering and leaving the disk-full state.

        Writes stop above the warning level and resume only at or below the force-clean level, as in
        RocketMQ: between the two the state stays as it was, so writes do not flap while forced
        cleaning works the usage down."""
        ratio = self.measure()
        limit = self.warning_level
        if ratio > limit:
            was_full = self.refusal is not None
            self.refusal = (
                f"disk full: {ratio:.1%} of {self.root} used (limit {limit:.0%}); "
                f"writes resume at {self.force_level:.0%}"
            )
            if not was_full:
                log.warning("%s; refusing writes", self.refusal)
        elif self.refusal is not None and ratio <= self.force_level:
            # Also on an unmeasurable disk (-1), as RocketMQ does: a broken probe must not block
            # writes for good.
            self.refusal = None
            if ratio < 0:
                log.warning("disk usage of %s unknown; accepting writes again", self.root)
            else:
                log.warning(
                    "disk usage back to %.1f%% of %s (at most %.0f%%); accepting writes again",
                    ratio * 100,
                    self.root,
                    self.force_level * 100,
                )
        return ratio


class CleanService:
    """Deletes expired files; see the module docstring. Runs on the writer's thread."""

    def __init__(self, root: Path, config: StoreConfig) -> None:
        self.guard = DiskGuard(root, config)
        self._delete_hours = parse_delete_when(config.delete_when)
        self._reserved_ms = config.file_reserved_time * _HOUR_MS
        self._forcibly = config.clean_file_forcibly_enable
        self._batch_max = max(1, config.delete_file_batch_max)
        self._last_min = -1  # the commit log's start at the last consume-queue pass

    def reset(self) -> None:
        """A (re)started store: the first pass checks every queue again."""
        self._last_min = -1

    def run(
        self,
        now_ms: int,
        commitlog: CommitLog,
        queues: QueueTable,
        retire: Retire,
        index: IndexFiles | None,
        batch_queues: Iterable[BatchConsumeQueue] = (),
    ) -> CleanReport:
        guard = self.guard
        ratio = guard.check()
        time_up = time.localtime(now_ms / 1000).tm_hour in self._delete_hours
        forced = ratio > guard.force_level
        space_to_delete = ratio < 0 or ratio > guard.max_used or forced
        report = CleanReport(
            ratio, time_up, space_to_delete, forced, guard.refusal is not None, commitlog.min_offset
        )
        if time_up or space_to_delete:
            report.commitlog_deleted = self._delete_segments(
                now_ms, commitlog, retire, ratio, forced and self._forcibly
            )
        cl_min = report.commitlog_min_offset = commitlog.min_offset
        if cl_min > self._last_min:
            self._last_min = cl_min
            report.consumequeue_deleted = self._delete_queue_files(cl_min, queues, retire)
            report.consumequeue_deleted += self._delete_batch_queue_files(cl_min, batch_queues, retire)
            if index is not None:
                report.index_files_deleted = index.delete_files_before(cl_min)
        return report

    def _delete_segments(
        self, now_ms: int, cl: CommitLog, retire: Retire, ratio: float, at_once: bool
    ) -> list[Path]:
        """Expired segments from the oldest on (all but the last when *at_once*), at most
        deleteFileBatchMax of them; stops at the first one kept, so only a prefix ever goes."""
        count = 0
        # Never the last segment: it is the one being written.
        for seg in cl.segments[: min(len(cl.segments) - 1, self._batch_max)]:
            if not at_once:
                try:
                    modified_ms = os.stat(seg.path).st_mtime_ns // 1_000_000
                except OSError as exc:
                    log.warning("retention: cannot stat %s: %s", seg.path, exc)
                    break
                if now_ms < modified_ms + self._reserved_ms:
                    break
            count += 1
        # Unlinked before they leave the list: one that cannot be deleted stays in use, with all
        # after it, so memory and disk agree on where the log starts.
        deleted = cl.drop_head(len(unlink_oldest_first(cl.segments[:count])))
        for seg in deleted:
            if at_once:
                log.warning(
                    "retention: disk %.1f%% full: deleted commit-log segment %s whatever its age",
                    ratio * 100,
                    seg.path.name,
                )
            else:
                log.info("retention: deleted expired commit-log segment %s", seg.path.name)
        if deleted:
            retire(deleted)
        return [seg.path for seg in deleted]

    def _delete_batch_queue_files(
        self, cl_min: int, batch_queues: Iterable[BatchConsumeQueue], retire: Retire
    ) -> list[Path]:
        deleted = [mf.path for bq in batch_queues for mf in bq.drop_files_before(cl_min, retire)]
        if deleted:
            log.info(
                "retention: deleted %d batch consume-queue file(s) pointing below commit-log offset %d",
                len(deleted),
                cl_min,
            )
        return deleted

    def _delete_queue_files(self, cl_min: int, queues: QueueTable, retire: Retire) -> list[Path]:
        deleted: list[MappedFile] = []
        for cq in queues.all_queues():
            count = cq.files_before(cl_min)
            if count:
                dropped = cq.drop_head(len(unlink_oldest_first(cq.files[:count])))
                if dropped:
                    deleted += dropped
                    retire(dropped)
            cq.adjust_min(cl_min)
        paths = [mf.path for mf in deleted] + queues.delete_unloaded_files_before(cl_min)
        if paths:
            log.info(
                "retention: deleted %d consume-queue file(s) pointing below commit-log offset %d",
                len(paths),
                cl_min,
            )
        return paths
