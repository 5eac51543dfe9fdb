"""Epochs: which mastership wrote which stretch of the commit log (RocketMQ 5's epoch file).

Each time a broker starts acting as master it begins an epoch, a number greater than any before it in
its group, at its commit log's end. A store's history is the list of (epoch, start offset) entries;
an entry's stretch of the log ends where the next entry starts, the last one at the log's end. Two
stores whose histories hold the same epoch with the same start hold the same bytes in that stretch,
as far as both have it: this is how a slave finds where its log parts from its master's.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cometmq.atomic_file import read_with_backup, write_atomic

__all__ = [
    "EPOCH_FILE_NAME",
    "EpochEntry",
    "EpochFile",
    "check_history",
    "clipped",
    "consistent_end",
    "pack_epochs",
    "unpack_epochs",
]

log = logging.getLogger("cometmq.store")

EPOCH_FILE_NAME: Final = "epochFileCheckpoint"
# RocketMQ's CheckpointFile does not check the entries against a CRC line holding 0.
_UNCHECKED_CRC: Final = 0


@dataclass(slots=True, frozen=True)
class EpochEntry:
    """Mastership *epoch* began writing at commit-log offset *start_offset*."""

    epoch: int
    start_offset: int


def check_history(entries: Sequence[EpochEntry]) -> None:
    """``ValueError`` unless *entries* are a history: epochs ≥ 1 and increasing, start offsets ≥ 0 and
    never decreasing (an epoch that wrote nothing shares its start with the next)."""
    for i, entry in enumerate(entries):
        if entry.epoch < 1 or entry.start_offset < 0:
            raise ValueError(f"epoch entry {entry} has an epoch below 1 or a negative start offset")
        if i and (entry.epoch <= entries[i - 1].epoch or entry.start_offset < entries[i - 1].start_offset):
            raise ValueError(
                f"epoch entry {entry} does not follow {entries[i - 1]}: epochs must increase and "
                "start offsets must not decrease"
            )


def clipped(entries: Sequence[EpochEntry], end: int) -> list[EpochEntry]:
    """The entries that begin at or before a commit log's *end*: an entry beginning beyond it
    describes bytes the log does not hold. One beginning exactly at the end is kept (an epoch that
    has written nothing yet, such as a master's just begun)."""
    return [entry for entry in entries if entry.start_offset <= end]


def consistent_end(
    local: Sequence[EpochEntry], local_end: int, master: Sequence[EpochEntry], master_end: int
) -> int:
    """Where a slave's log (history *local*, ending at *local_end*) stops agreeing with its master's
    (*master*, *master_end*): the last epoch both histories hold with the same start offset, and there
    the smaller of its ends in the two logs (an entry ends where the next one starts, the last one at
    its log's end). 0 when no epoch is common: nothing is known to be shared. When either history is
    empty (a store that never had a master's epoch), the shorter log's end: there is nothing to
    compare, as RocketMQ skips truncation for a replica without epochs."""
    if not local or not master:
        return min(local_end, master_end)
    master_at = {entry.epoch: i for i, entry in enumerate(master)}
    for i in range(len(local) - 1, -1, -1):
        entry = local[i]
        j = master_at.get(entry.epoch)
        if j is None or master[j].start_offset != entry.start_offset:
            continue
        ends_here = local[i + 1].start_offset if i + 1 < len(local) else local_end
        ends_there = master[j + 1].start_offset if j + 1 < len(master) else master_end
        return min(ends_here, ends_there)
    return 0


def _crc(lines: bytes) -> int:
    # Java's UtilAll.crc32: the CRC-32 as a non-negative int.
    return zlib.crc32(lines) & 0x7FFFFFFF


def pack_epochs(entries: Iterable[EpochEntry]) -> bytes:
    """The epoch file's content (format: ``store.format``, section *Epoch file*)."""
    listed = list(entries)
    lines = "".join(f"{e.epoch}-{e.start_offset}\n" for e in listed).encode()
    return f"{len(listed)}\n{_crc(lines)}\n".encode() + lines


def unpack_epochs(data: bytes) -> list[EpochEntry] | None:
    """The entries of an epoch file's content; None when it is torn, damaged or not one."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return None
    if not text.endswith("\n"):
        return None
    count_line, _, rest = text.partition("\n")
    crc_line, _, body = rest.partition("\n")
    entries = []
    try:
        count, crc = int(count_line), int(crc_line)
        for line in body.splitlines():
            epoch, dash, start = line.partition("-")
            if not dash:
                return None
            entries.append(EpochEntry(int(epoch), int(start)))
        check_history(entries)
    except ValueError:
        return None
    if count != len(entries) or (crc != _UNCHECKED_CRC and crc != _crc(body.encode())):
        return None
    return entries


class EpochFile:
    """``<root>/epochFileCheckpoint``, replaced atomically with a ``.bak`` of the previous content."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[EpochEntry]:
        """The history on disk: the file, else its ``.bak``; empty when neither is usable (logged)."""
        for path, data in read_with_backup(self.path):
            entries = unpack_epochs(data)
            if entries is not None:
                return entries
            log.error("epoch file %s is damaged; ignoring it", path)
        return []

    def write(self, entries: Sequence[EpochEntry]) -> None:
        write_atomic(self.path, pack_epochs(entries))
