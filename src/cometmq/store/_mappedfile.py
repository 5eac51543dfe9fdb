"""A fixed-size file mapped read-write: the unit both the commit log and consume queues are made of."""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
from pathlib import Path
from typing import Final

__all__ = ["MappedFile", "fsync_dir", "unlink_oldest_first"]

log = logging.getLogger("cometmq.store")


class MappedFile:
    """One segment file: ``size`` bytes covering offsets ``[start, start + size)`` of its stream.

    The writer thread writes through ``write_at`` (batches, and single records under SYNC_FLUSH)
    or ``mm`` (single records under ASYNC_FLUSH, consume-queue units, index entries); readers slice
    ``view``. The flush thread only calls ``sync``, which needs nothing but the descriptor.

    A store into the mapping is safe only where the file's blocks are reserved: a page of a sparse
    file that the filesystem has no room for faults with SIGBUS, which kills the process. The file
    is sparse, and bytes ``[0, reserved_to)`` have their blocks reserved (``posix_fallocate``:
    quick on extent filesystems, nothing is written). The writer calls ``reserve`` before it
    stores past ``reserved_to``, which reserves a step of ``reserve_step`` bytes beyond the store,
    so the reservation grows with the data, ahead of the writer, and a full disk is an ``OSError``
    there. ``create`` reserves the first step; a file opened from an earlier run starts with nothing
    reserved (it may have holes) and is reserved from its start on the first ``reserve``. Writes
    through ``write_at`` need no reservation: a full disk fails them cleanly.
    """

    __slots__ = (
        "end",
        "fd",
        "mm",
        "needs_dir_sync",
        "path",
        "reserve_step",
        "reserved_to",
        "size",
        "start",
        "view",
    )

    def __init__(
        self, path: Path, start: int, size: int, fd: int, reserve_step: int, random_access: bool = False
    ) -> None:
        self.path = path
        self.start = start
        self.size = size
        self.end = start + size
        self.fd = fd
        self.mm = mmap.mmap(fd, size)
        if random_access:
            # No read-around on a fault: the first store into a page of a fresh file otherwise makes
            # the kernel fill the pages around it too, far slower than the one page (docs/store.md).
            self.mm.madvise(mmap.MADV_RANDOM)
        self.view = memoryview(self.mm)
        self.needs_dir_sync = False
        self.reserve_step = reserve_step
        self.reserved_to = 0  # a multiple of the page size, or ``size`` (see ``_PAGE``)

    @classmethod
    def create(
        cls, path: Path, start: int, size: int, reserve_step: int, random_access: bool = False
    ) -> MappedFile:
        """Create the file (emptying any leftover: new files only ever go beyond the end), sparse,
        with the blocks of its first ``reserve_step`` bytes reserved. On a full disk this raises
        ``OSError`` and leaves no file behind. *random_access*: the mapping is read and written a
        few bytes at a time (``MADV_RANDOM``)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, size)
            mf = cls(path, start, size, fd, reserve_step, random_access)
            mf.reserve(0)
        except BaseException:
            os.close(fd)
            # Leave no file: the next start would load it as part of the store.
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        # The new directory entry must be durable before data in the file is reported durable;
        # ``sync`` (on the flush thread) does that, so the writer never blocks on a directory fsync.
        mf.needs_dir_sync = True
        return mf

    @classmethod
    def open(cls, path: Path, start: int, reserve_step: int, random_access: bool = False) -> MappedFile:
        """Map an existing file at its current size (a changed config only applies to new files)."""
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            return cls(path, start, size, fd, reserve_step, random_access)
        except BaseException:
            os.close(fd)
            raise

    def reserve(self, end: int) -> None:
        """Reserve the blocks of bytes ``[0, end)`` and of the next ``reserve_step`` bytes (whole
        pages, within the file), so that the writer stores up to ``end`` and a step further without
        coming back; ``OSError`` when the disk has no room (``reserved_to`` stays)."""
        target = min(self.size, _page_ceil(end + self.reserve_step))
        if target > self.reserved_to:
            self.reserved_to = target if self.allocate(self.reserved_to, target) else self.size

    def allocate(self, begin: int, end: int) -> bool:
        """Allocate the blocks of the pages holding bytes ``[begin, end)``: their data stays, holes
        are filled. ``OSError`` when the disk has no room. False where the filesystem cannot reserve
        blocks at all (logged once): the file is then used as it is, as on any such filesystem."""
        global _cannot_reserve_logged
        begin -= begin % _PAGE
        end = min(self.size, _page_ceil(end))
        if end <= begin:
            return True  # posix_fallocate refuses an empty range (EINVAL)
        try:
            os.posix_fallocate(self.fd, begin, end - begin)
        except OSError as exc:
            if exc.errno not in _CANNOT_RESERVE:
                raise
            if not _cannot_reserve_logged:
                _cannot_reserve_logged = True
                log.warning(
                    "the filesystem cannot reserve blocks for store files (%s): a disk that fills up "
                    "may stop the broker",
                    exc.strerror or exc,
                )
            return False
        return True

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Write *data* at *pos* through the descriptor rather than the mapping.

        For appends this is the cheaper way into the page cache: a first store into a mapped page of
        a sparse file faults, and the kernel zero-fills the page (and the read-ahead pages after it)
        before the copy overwrites it; ``pwrite`` of whole pages skips both. Mapped readers see the
        bytes at once (one page cache). A full disk is an ``OSError`` here, where a store into the
        mapping would be a SIGBUS."""
        written = os.pwrite(self.fd, data, pos)
        if written != len(data):  # only when the filesystem ran out of room part way
            raise OSError(errno.ENOSPC, f"short write to {self.path.name}: {written} of {len(data)} bytes")

    def sync(self) -> None:
        # fdatasync rather than mmap.flush: it writes back the mapping's dirty pages just the same on
        # Linux, and CPython releases the GIL around it, so the event loop keeps running meanwhile.
        os.fdatasync(self.fd)
        if self.needs_dir_sync:
            fsync_dir(self.path.parent)
            self.needs_dir_sync = False

    def zero_from(self, pos: int) -> None:
        """Make bytes ``[pos, size)`` zero without touching every page: shrink the file, then grow it
        back (the kernel drops the pages; the mapping stays valid and reads zeros there). That frees
        their blocks, so the reservation ends at ``pos``'s page at most."""
        os.ftruncate(self.fd, pos)
        os.ftruncate(self.fd, self.size)
        self.reserved_to = min(self.reserved_to, pos - pos % _PAGE)

    def close(self) -> None:
        """Unmap and close. If readers still hold slices of ``view`` the mapping cannot be closed now;
        it is then left to the garbage collector, which unmaps it when the last slice dies."""
        self.view.release()
        try:
            self.mm.close()
        except BufferError:
            log.debug("%s still has readers; unmapping it later", self.path)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def unlink(self) -> None:
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, start={self.start}, size={self.size})"


# What posix_fallocate answers where the filesystem cannot reserve blocks at all (musl's, which does
# not fall back to writing a byte per block as glibc's does).
_CANNOT_RESERVE: Final = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})
_cannot_reserve_logged = False
# Reservations cover whole pages: a store into a page faults for the blocks of the whole page.
_PAGE: Final = mmap.PAGESIZE


def _page_ceil(n: int) -> int:
    return -(-n // _PAGE) * _PAGE


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (files created, renamed, removed) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_oldest_first(files: list[MappedFile]) -> list[MappedFile]:
    """Unlink *files* in order, stopping at the first failure: what stays on disk is then still a
    contiguous run before the kept files (a hole would cost the files after it at the next load).
    Returns the files unlinked, a prefix of *files*."""
    for i, mf in enumerate(files):
        try:
            mf.unlink()
        except OSError as exc:
            log.error(
                "retention: cannot delete %s (%s); it and %d later file(s) stay",
                mf.path,
                exc,
                len(files) - i - 1,
            )
            return files[:i]
    return files
