"""The message index: ``topic#key`` → commit-log offsets, what QUERY_MESSAGE searches.

Layout, and why it is not RocketMQ's: ``store.format`` (section *Index*) and docs/store.md.

Threading, the store's single-writer rule: the event-loop thread appends entries (``add`` /
``add_keys``, from ``MessageStore.put`` / ``put_batch``), rolls to new files (appending to ``files``),
answers queries and deletes old files (``delete_files_before``: it replaces ``files`` with a new list and
hands the deleted files to ``retire``, which has the flush thread close them between two syncs).
The flush thread only calls ``sync``: on a copy of ``files`` it fdatasyncs the entries written so
far, then writes and fdatasyncs the headers that count them. No lock is needed: the two threads
never write the same bytes (entries vs. header), a header counts only entries complete before it
read ``count``, and no file is closed while a sync may still use it.
"""

from __future__ import annotations

import calendar
import logging
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from cometmq.errors import RecordError
from cometmq.protocol.properties import KEY_SEPARATOR, decode_properties
from cometmq.protocol.record import BLANK_MAGIC_CODE, decode_record_at, iter_records

from ._commitlog import CommitLog
from ._dispatch import is_dispatched
from ._mappedfile import MappedFile, fsync_dir, unlink_oldest_first
from ._model import QueryResult, index_names
from .format import (
    INDEX_HEADER_SIZE,
    IndexHeader,
    index_file_size,
    pack_index_header,
    unpack_index_header,
)

__all__ = ["IndexFile", "IndexService", "index_key_hash"]

log = logging.getLogger("cometmq.store")

_HASH: Final = struct.Struct(">I")
_OFFSET: Final = struct.Struct(">q")
_SIZE_MAGIC: Final = struct.Struct(">iI")
# A failed index-file creation or reservation (disk full) is tried again after this long, not on
# every put.
_ROOM_RETRY_S: Final = 10.0
# An index file's blocks are reserved for this many entries at a time, in both arrays (768 KiB),
# ahead of the writer (``IndexFile.reserve``): a file takes that much disk rather than its whole size
# (240 MB by default), and puts pay for two posix_fallocate calls per 65 536 keys.
_RESERVE_ENTRIES: Final = 1 << 16
_pack_hash: Final = _HASH.pack_into
_pack_offset: Final = _OFFSET.pack_into
_crc32: Final = zlib.crc32
_NO_TIMESTAMP: Final = 1 << 62  # in-memory begin timestamp of an empty file: above any real one
_EVERYTHING: Final = 1 << 62  # "first record not indexed" while every record is
_NAME_LENGTH: Final = 17  # yyyyMMddHHmmssSSS


def _topic_crc(topic: str) -> int:
    """crc32 of the UTF-8 ``topic#``, which an entry's hash continues over the key: computed once
    per topic (``crc32(b"topic#key") == crc32(b"key", crc32(b"topic#"))``)."""
    return _crc32(f"{topic}#".encode("utf-8", "surrogatepass"))


def _key_hashes(topic_crc: int, keys: Iterable[str]) -> list[int]:
    """The hashes of the entries for *keys* (non-empty) of the topic whose ``_topic_crc`` is
    *topic_crc*, in order: crc32 of the UTF-8 ``topic#key``."""
    return [_crc32(key.encode("utf-8", "surrogatepass"), topic_crc) for key in keys]


def index_key_hash(topic: str, key: str) -> int:
    """The hash an index entry holds for the non-empty *key* of *topic*."""
    return _key_hashes(_topic_crc(topic), (key,))[0]


def _file_name(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in UTC: like RocketMQ's names, but never going back across a
    daylight-saving change, so name order is creation order."""
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(ms // 1000)) + f"{ms % 1000:03d}"


def _name_ms(name: str) -> int:
    """Inverse of ``_file_name`` (-1 if *name* is not one)."""
    if len(name) != _NAME_LENGTH or not name.isdigit() or not name.isascii():
        return -1
    try:
        utc = time.strptime(name[:14], "%Y%m%d%H%M%S")
    except ValueError:
        return -1
    return calendar.timegm(utc) * 1000 + int(name[14:])


def _header_begin_offset(path: Path) -> int | None:
    """Commit-log offset of the first entry's record as the header of *path* says (None if the
    header is unreadable or counts no entry)."""
    try:
        with path.open("rb") as f:
            header = unpack_index_header(f.read(INDEX_HEADER_SIZE))
    except OSError:
        return None
    return header.begin_offset if header is not None and header.count else None


class IndexFile:
    """One index file: a header, ``capacity`` hashes, ``capacity`` offsets (``store.format``).

    ``count`` entries are valid (written by the event-loop thread, after the entry itself);
    ``synced_count`` of them, and every record below ``indexed_to``, are vouched for by the header
    on disk (flush thread).
    """

    __slots__ = (
        "begin_ts",
        "capacity",
        "count",
        "end_ts",
        "hash_at",
        "indexed_to",
        "mf",
        "mm",
        "off_at",
        "reserved_count",
        "synced_count",
    )

    def __init__(
        self, mf: MappedFile, capacity: int, count: int, begin_ts: int, end_ts: int, indexed_to: int
    ) -> None:
        self.mf = mf
        self.mm = mf.mm
        self.capacity = capacity
        self.count = count
        self.synced_count = count
        self.indexed_to = indexed_to
        # min / max store time of the entries' records: a query skips files outside its range.
        self.begin_ts = begin_ts if count else _NO_TIMESTAMP
        self.end_ts = end_ts if count else 0
        self.hash_at = INDEX_HEADER_SIZE
        self.off_at = INDEX_HEADER_SIZE + 4 * capacity
        # Entries below this have their blocks reserved (``reserve``); a file from an earlier run
        # (which may have holes) starts with none.
        self.reserved_count = 0

    @classmethod
    def create(cls, path: Path, capacity: int) -> IndexFile:
        """A new empty file, sparse but for the header's page (the first ``reserve`` step of its
        ``MappedFile``); the entries' blocks are reserved as they come."""
        mf = MappedFile.create(path, 0, index_file_size(capacity), INDEX_HEADER_SIZE)
        mf.mm[:INDEX_HEADER_SIZE] = pack_index_header(IndexHeader(capacity, 0, 0, 0, 0, 0, 0))
        return cls(mf, capacity, 0, 0, 0, 0)

    @classmethod
    def open(cls, path: Path) -> IndexFile | None:
        """The file at *path*, or None (nothing left open) if its header is damaged or does not
        match its size or its entries."""
        try:
            mf = MappedFile.open(path, 0, INDEX_HEADER_SIZE)
        except (OSError, ValueError):  # ValueError: mmap of an empty file
            return None
        header = (
            unpack_index_header(bytes(mf.mm[:INDEX_HEADER_SIZE])) if mf.size >= INDEX_HEADER_SIZE else None
        )
        if header is None or mf.size != index_file_size(header.capacity):
            mf.close()
            return None
        f = cls(
            mf, header.capacity, header.count, header.begin_timestamp, header.end_timestamp, header.indexed_to
        )
        if header.count and (f.offset_at(0) != header.begin_offset or f.end_offset != header.end_offset):
            f.close()
            return None
        return f

    @property
    def path(self) -> Path:
        return self.mf.path

    def offset_at(self, i: int) -> int:
        value: int = _OFFSET.unpack_from(self.mm, self.off_at + 8 * i)[0]
        return value

    @property
    def begin_offset(self) -> int:
        """Commit-log offset of the first entry's record (-1 when empty)."""
        return self.offset_at(0) if self.count else -1

    @property
    def end_offset(self) -> int:
        """Commit-log offset of the last entry's record (-1 when empty)."""
        return self.offset_at(self.count - 1) if self.count else -1

    def first_at_or_after(self, offset: int) -> int:
        """Index of the first entry pointing at *offset* or later (``count`` if none): offsets never
        decrease along a file, so a binary search."""
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self.offset_at(mid) < offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def hits_newest_first(self, hash_bytes: bytes) -> Iterator[int]:
        """Indexes of the entries holding *hash_bytes*, last entry first (``mmap.rfind`` runs at C
        speed; a hit that is not 4-aligned straddles two hashes and does not count)."""
        start = self.hash_at
        end = start + 4 * self.count
        mm = self.mm
        while True:
            pos = mm.rfind(hash_bytes, start, end)
            if pos < 0:
                return
            rel = pos - start
            if not rel % 4:
                yield rel // 4
            end = pos + 3  # every match starting before pos fits in [start, pos + 3)

    def reserve(self, count: int) -> None:
        """Reserve the blocks of entries ``[0, count)`` and of the next ``_RESERVE_ENTRIES``, so that
        the writer stores them through the mapping without coming back. Entries are appended, so
        each array's reserved blocks grow from its start like a segment's; hashes and offsets are two
        arrays, hence two ranges. ``OSError`` when the disk has no room."""
        have = self.reserved_count
        if count <= have:
            return
        target = min(self.capacity, count + _RESERVE_ENTRIES)
        mf = self.mf
        if mf.allocate(self.hash_at + 4 * have, self.hash_at + 4 * target) and mf.allocate(
            self.off_at + 8 * have, self.off_at + 8 * target
        ):
            self.reserved_count = target
        else:  # the filesystem cannot reserve blocks: the file is used as it is
            self.reserved_count = self.capacity

    def truncate(self, count: int) -> None:
        """Forget the entries from *count* on (start-up only); the header is rewritten by the next
        ``flush``."""
        self.count = count
        self.synced_count = -1
        if not count:
            self.begin_ts, self.end_ts = _NO_TIMESTAMP, 0

    def flush(self, log_end: int | None) -> None:
        """Make the entries durable, then the header that counts them, so a header on disk never
        counts an entry that is not. Flush thread (or start-up), files in order.

        *log_end*, for the newest file, is how far the commit log is indexed: its end read before
        ``count`` (the writer indexes a record before publishing its end, so every record below it
        has its entries counted by now), or less while indexing has stopped. None for older files,
        which vouch for the records below their own last entry's record.
        """
        count = self.count
        if log_end is None:
            log_end = self.offset_at(count - 1) if count else 0
        if count == self.synced_count and log_end <= self.indexed_to:
            return
        # Read after count: the writer updates the times before count, so they cover its entries.
        begin_ts, end_ts = self.begin_ts, self.end_ts
        if count != self.synced_count:
            self.mf.sync()
        indexed_to = max(log_end, self.indexed_to)
        if count:
            header = IndexHeader(
                self.capacity,
                count,
                begin_ts,
                end_ts,
                self.offset_at(0),
                self.offset_at(count - 1),
                indexed_to,
            )
        else:
            header = IndexHeader(self.capacity, 0, 0, 0, 0, 0, indexed_to)
        self.mm[:INDEX_HEADER_SIZE] = pack_index_header(header)
        self.mf.sync()
        self.synced_count = count
        self.indexed_to = indexed_to

    def close(self) -> None:
        self.mf.close()


class IndexService:
    """The index files of one store, in creation order (so in commit-log order); see the module
    docstring for threading. *retire* takes the files ``delete_files_before`` deleted and has them
    closed when no sync can be using them (``MessageStore._retire_files``)."""

    def __init__(self, directory: Path, capacity: int, retire: Callable[[list[MappedFile]], None]) -> None:
        if capacity < 1:
            raise ValueError("max_index_num must be at least 1")
        self.dir = directory
        self.capacity = capacity
        self.files: list[IndexFile] = []
        self._cur: IndexFile | None = None  # where the next entry goes; None: create one first
        self._retire = retire
        self._prefix_crc: dict[str, int] = {}
        self._room_retry_at = 0.0  # monotonic time before which ``_room`` tries nothing; 0: none failed
        # Commit-log offset of the first record whose entries could not all be written (no index file
        # could be created or grown); no header vouches for it or beyond, so the next start indexes it
        # again. Written by the writer before it publishes the record's end, read by ``sync``.
        self._first_unindexed = _EVERYTHING
        self._last_name_ms = 0
        self._cl: CommitLog | None = None

    # -- start-up ------------------------------------------------------------------------------

    def load(self, cl: CommitLog) -> None:
        """Open the files, drop what the recovered commit log no longer backs and index what the
        files miss. Runs after the commit log's recovery, before the first put."""
        self._cl = cl
        self.dir.mkdir(parents=True, exist_ok=True)
        dropped_from = self._open_files()
        end = cl.max_offset
        # Every record below the newest header's "indexed to" has its entries on disk; entries
        # beyond it were written after that header (or point at records recovery cut, which a
        # header synced before the log may count). Files dropped as damaged or out of order took
        # their records' entries with them.
        resume = min(max((f.indexed_to for f in self.files), default=0), end, dropped_from)
        dropped = self._truncate_from(resume)
        if dropped:
            log.info("index: dropped %d entries from commit-log offset %d on", dropped, resume)
        for f in self.files:
            if f.indexed_to > resume:
                f.indexed_to = 0  # rewritten below, before new entries go over the dropped ones
        self._flush_all(resume)
        if self.files:
            self._cur = self.files[-1]
        else:
            # Even without keys to index, a file's header remembers how far the log was indexed.
            self._room(0)
        resume = max(resume, cl.min_offset)
        if resume < end:
            self._reindex(cl, resume, end)
        self._flush_all(end)

    def _open_files(self) -> int:
        """Open the files in name (creation) order. A damaged file is deleted with every later one:
        their entries cannot be trusted to follow on. So is a file whose entries start before the
        previous file's end (names from before they were UTC may be out of order across a
        daylight-saving change). Returns the lowest commit-log offset the deleted files' headers
        say they held entries for (``_EVERYTHING`` if none), which the next index must start at."""
        paths = []
        for path in self.dir.iterdir():
            if _name_ms(path.name) < 0 or not path.is_file():
                log.warning("ignoring unexpected file %s in the index directory", path)
                continue
            paths.append(path)
        paths.sort(key=lambda p: p.name)
        if paths:
            self._last_name_ms = _name_ms(paths[-1].name)  # new names go after every existing one
        for i, path in enumerate(paths):
            f = IndexFile.open(path)
            if f is not None and self.files and not self.files[-1].count:
                empty = self.files.pop()  # only the newest file may be empty
                empty.close()
                empty.mf.unlink()
            if f is not None and self.files and f.count and f.begin_offset < self.files[-1].end_offset:
                f.close()
                f = None
            if f is None:
                lost = paths[i:]
                log.warning(
                    "index file %s is damaged or out of order; deleting it and %d later file(s)",
                    path.name,
                    len(lost) - 1,
                )
                begins = [b for b in map(_header_begin_offset, lost) if b is not None]
                for p in lost:
                    p.unlink(missing_ok=True)
                fsync_dir(self.dir)
                return min(begins, default=_EVERYTHING)
            self.files.append(f)
        return _EVERYTHING

    def _truncate_from(self, offset: int) -> int:
        """Drop the entries pointing at *offset* or later; return how many. Walks back from the
        newest file until one with entries keeps all of them (an empty newest file, as a roll leaves
        it until the next sync, does not stop the walk). Files left empty go, except the newest."""
        files = self.files
        dropped = 0
        j = len(files)
        while j:
            f = files[j - 1]
            if f.count:
                i = f.first_at_or_after(offset)
                if i == f.count:
                    break
                dropped += f.count - i
                f.truncate(i)
                if i:
                    break
            j -= 1
        # files[j:] are empty now. The newest stays, to take the next entries (its header is
        # rewritten before any); emptied older ones would break "only the newest may be empty".
        gone = files[j:-1]
        if gone:
            self.files = files[:j] + files[-1:]
            for f in gone:
                f.close()
                f.mf.unlink()
            fsync_dir(self.dir)  # a deleted file coming back would hold entries indexed again
        return dropped

    def truncate_from(self, offset: int) -> int:
        """Drop the entries of the records at commit-log *offset* and beyond, which the commit log
        was cut back to (writer's thread, while no flush cycle runs); return how many. Recovery after
        a crash before the headers are rewritten drops them too: no header vouches beyond the log's
        end."""
        dropped = self._truncate_from(offset)
        for f in self.files:
            f.indexed_to = min(f.indexed_to, offset)
            f.synced_count = -1  # rewrite the header, whose count or indexed-to may be beyond
        if self._first_unindexed >= offset:
            self._first_unindexed = _EVERYTHING  # that record is gone
        self._cur = self.files[-1] if self.files else None
        return dropped

    def _reindex(self, cl: CommitLog, start: int, end: int) -> None:
        """Index the records of the commit log in [start, end) (recovery; the log is verified)."""
        if not is_record_boundary(cl, start):
            # These index files belong to another log: start afresh.
            log.warning("index: no record starts at %d; indexing the whole commit log again", start)
            self.close()
            for path in self.dir.iterdir():
                if _name_ms(path.name) >= 0:
                    path.unlink()
            self._room(0)
            start = cl.min_offset
        log.info("index: indexing commit log [%d, %d)", start, end)
        entries_before = sum(f.count for f in self.files)
        records = 0
        pos = start
        for seg in list(cl.segments):
            if seg.end <= pos:
                continue
            if pos >= end:
                break
            rel = pos - seg.start
            limit = min(seg.size, end - seg.start)
            try:
                for rec in iter_records(seg.view[rel:limit]):
                    if rec.commitlog_offset != pos:
                        raise RecordError(f"record at {pos} claims offset {rec.commitlog_offset}")
                    pos += rec.total_size
                    if not is_dispatched(rec.sys_flag):
                        continue
                    props = decode_properties(rec.properties)
                    records += 1
                    self.add(
                        rec.topic,
                        props.get("UNIQ_KEY", ""),
                        props.get("KEYS", ""),
                        rec.commitlog_offset,
                        rec.store_timestamp,
                    )
            except RecordError as exc:
                log.error("index: stopped indexing the commit log at %d: %s", pos, exc)
                break
            pos = seg.end
        entries = sum(f.count for f in self.files) - entries_before
        log.info("index: indexed %d entries for %d records", entries, records)

    # -- writing (event-loop thread) -----------------------------------------------------------

    def add(self, topic: str, uniq_key: str, keys: str, offset: int, store_ts: int) -> None:
        """Index one record under its UNIQ_KEY and each KEYS entry.

        Hot path, called from ``MessageStore.put`` (bench/index.py, bench/store.py): entries are
        packed in place while they fit the current file's reserved blocks, and a UNIQ_KEY alone
        (what clients send), or with one KEYS entry, is hashed inline rather than through
        ``index_names`` and ``_key_hashes`` (two calls and a comprehension); the general ``_append``
        (struct.pack of a list) costs more than all of this.
        """
        prefix = self._prefix_crc.get(topic)
        if prefix is None:
            prefix = self._topic_prefix(topic)
        f = self._cur
        if keys:
            if uniq_key and KEY_SEPARATOR not in keys:  # one KEYS entry: index_names, inlined
                hashes = [
                    _crc32(uniq_key.encode("utf-8", "surrogatepass"), prefix),
                    _crc32(keys.encode("utf-8", "surrogatepass"), prefix),
                ]
            else:
                names = index_names(uniq_key, keys)
                if not names:
                    return
                hashes = _key_hashes(prefix, names)
            n = len(hashes)
            if f is None or f.count + n > f.reserved_count:
                self._append(hashes, [offset] * n, store_ts)
                return
            mm = f.mm
            i = f.count
            at = f.hash_at + 4 * i
            off_at = f.off_at + 8 * i
            for h in hashes:
                _pack_hash(mm, at, h)
                _pack_offset(mm, off_at, offset)
                at += 4
                off_at += 8
        else:
            if not uniq_key:
                return
            h = _crc32(uniq_key.encode("utf-8", "surrogatepass"), prefix)  # _key_hashes, inlined
            if f is None or f.count >= f.reserved_count:
                self._append([h], [offset], store_ts)
                return
            i = f.count
            n = 1
            _pack_hash(f.mm, f.hash_at + 4 * i, h)
            _pack_offset(f.mm, f.off_at + 8 * i, offset)
        if store_ts > f.end_ts:
            f.end_ts = store_ts
        if store_ts < f.begin_ts:
            f.begin_ts = store_ts
        f.count = i + n  # last: the flush thread counts only complete entries

    def add_keys(self, topic: str, keys: list[bytes], offsets: list[int], store_ts: int) -> None:
        """Index the records of one ``put_batch``: *keys[i]* (UTF-8, non-empty) names the record at
        *offsets[i]*, in the order ``add`` would give them. One packed slice of hashes and one of
        offsets per file touched."""
        prefix = self._prefix_crc.get(topic)
        if prefix is None:
            prefix = self._topic_prefix(topic)
        self._append([_crc32(key, prefix) for key in keys], offsets, store_ts)

    def add_records(self, records: list[tuple[str, str, str, int, int]]) -> None:
        """Index several records, ``(topic, uniq_key, keys, offset, store_ts)`` in log order, as ``add``
        would one by one: one packed slice of hashes and one of offsets per file touched (a slave's
        chunk, bench/replication.py)."""
        hashes: list[int] = []
        offsets: list[int] = []
        stamps: list[int] = []
        prefixes = self._prefix_crc
        for topic, uniq_key, keys, offset, store_ts in records:
            prefix = prefixes.get(topic)
            if prefix is None:
                prefix = self._topic_prefix(topic)
            if keys:
                for name in index_names(uniq_key, keys):
                    hashes.append(_crc32(name.encode("utf-8", "surrogatepass"), prefix))
                    offsets.append(offset)
                    stamps.append(store_ts)
            elif uniq_key:
                hashes.append(_crc32(uniq_key.encode("utf-8", "surrogatepass"), prefix))
                offsets.append(offset)
                stamps.append(store_ts)
        if hashes:
            self._append(hashes, offsets, stamps)

    def _topic_prefix(self, topic: str) -> int:
        if len(self._prefix_crc) > 4096:
            self._prefix_crc.clear()
        crc = self._prefix_crc[topic] = _topic_crc(topic)
        return crc

    def _append(self, hashes: list[int], offsets: list[int], store_ts: int | list[int]) -> None:
        """Pack entries into the files; *store_ts* is every entry's store timestamp, or each one's."""
        n = len(hashes)
        done = 0
        while done < n:
            f = self._cur
            if f is None or f.count >= f.reserved_count:
                f = self._room(n - done)
                if f is None:
                    # Before the writer publishes the record's end, so ``sync`` sees it in time.
                    self._first_unindexed = min(self._first_unindexed, offsets[done])
                    return
            i = f.count
            take = min(n - done, f.reserved_count - i)
            mm = f.mm
            at = f.hash_at + 4 * i
            mm[at : at + 4 * take] = struct.pack(f">{take}I", *hashes[done : done + take])
            at = f.off_at + 8 * i
            mm[at : at + 8 * take] = struct.pack(f">{take}q", *offsets[done : done + take])
            if isinstance(store_ts, int):
                first_ts = last_ts = store_ts
            else:
                first_ts = min(store_ts[done : done + take])
                last_ts = max(store_ts[done : done + take])
            if last_ts > f.end_ts:
                f.end_ts = last_ts
            if first_ts < f.begin_ts:
                f.begin_ts = first_ts
            f.count = i + take
            done += take

    def _room(self, n: int) -> IndexFile | None:
        """The file the next *n* entries go to (the current one, or a new one when it is full) with
        blocks reserved for as many of them as it holds. None if that fails (disk full), and then
        nothing is tried for ``_ROOM_RETRY_S``: records meanwhile are not indexed. The headers then
        vouch for nothing from the first record left unindexed on (``_first_unindexed``), so the
        next start indexes it and everything after it again."""
        now = time.monotonic()
        if now < self._room_retry_at:
            return None
        f = self._cur
        try:
            if f is None or f.count >= f.capacity:
                f = IndexFile.create(self._new_path(), self.capacity)
                self.files.append(f)
                self._cur = f
            f.reserve(min(f.count + n, f.capacity))
        except OSError as exc:
            if not self._room_retry_at:
                log.error(
                    "cannot create or grow an index file (%s); records are not indexed until it can be",
                    exc.strerror or exc,
                )
            self._room_retry_at = now + _ROOM_RETRY_S
            return None
        if self._room_retry_at:
            log.warning("index file created or grown; indexing goes on (keys of the records before are "
                        "indexed at the next start)")  # fmt: skip
            self._room_retry_at = 0.0
        return f

    def _new_path(self) -> Path:
        # Names never go back, even if the clock does (UTC, and after every existing name): name
        # order is creation order, which ``_open_files`` relies on.
        ms = max(time.time_ns() // 1_000_000, self._last_name_ms + 1)
        while (self.dir / _file_name(ms)).exists():
            ms += 1
        self._last_name_ms = ms
        return self.dir / _file_name(ms)

    # -- reading (event-loop thread) -----------------------------------------------------------

    def query(
        self, cl: CommitLog, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int, unique: bool
    ) -> QueryResult:
        """Records of *topic* whose UNIQ_KEY (*unique*) or one of whose KEYS is *key*, stored in
        [begin_ms, end_ms]; newest first, at most *max_num*, each once."""
        files = self.files
        result = QueryResult()
        newest = next((f for f in reversed(files) if f.count), None)
        if newest is not None:
            result.index_last_update_timestamp = newest.end_ts
            result.index_last_update_phyoffset = newest.end_offset
        if max_num <= 0 or not key:
            return result
        wanted = _HASH.pack(index_key_hash(topic, key))
        seen: set[int] = set()
        buffers = result.buffers
        for f in reversed(files):
            if not f.count or f.end_ts < begin_ms or f.begin_ts > end_ms:
                continue
            for i in f.hits_newest_first(wanted):
                offset = f.offset_at(i)
                if offset in seen:
                    continue
                seen.add(offset)
                record = cl.record_at(offset)
                if record is not None and _matches(record, topic, key, begin_ms, end_ms, unique):
                    buffers.append(record)
                    if len(buffers) >= max_num:
                        return result
        return result

    # -- flushing and retention ----------------------------------------------------------------

    def sync(self) -> None:
        """Make every entry written so far durable, and the headers counting them (flush thread)."""
        cl = self._cl
        self._flush_all(cl.max_offset if cl is not None else 0)  # the log's end before any count

    def _flush_all(self, log_end: int) -> None:
        """Flush every file, in order: a header vouches for the files before it. The newest file's
        header says the log is indexed up to *log_end*, or up to the first record that could not be
        indexed (read after *log_end*: the writer sets it before publishing that record's end)."""
        indexed_to = min(log_end, self._first_unindexed)
        files = list(self.files)  # the writer may append meanwhile; retired files close later
        for f in files[:-1]:
            f.flush(None)
        if files:
            files[-1].flush(indexed_to)

    def delete_files_before(self, commitlog_min_offset: int) -> int:
        """Delete the index files whose entries all point below *commitlog_min_offset* (their
        records are gone), oldest first; never the newest file (as RocketMQ). Returns how many.

        On the writer's thread, like ``put``, and as cheap: the files are unlinked and dropped from
        a new ``files`` list (the flush thread may be syncing the old one), and handed to
        ``retire``, so the flush thread unmaps and closes them between two syncs.
        """
        files = self.files
        count = 0
        while count < len(files) - 1:
            f = files[count]
            if f.count and f.end_offset >= commitlog_min_offset:
                break
            count += 1
        # Unlinked before they leave the list, oldest first: one that cannot be deleted stays, with
        # every later file, so the files left on disk still follow on.
        gone = unlink_oldest_first([f.mf for f in files[:count]])
        if not gone:
            return 0
        self.files = files[len(gone) :]
        self._retire(gone)
        log.info(
            "index: deleted %d file(s) below commit-log offset %d: %s",
            len(gone),
            commitlog_min_offset,
            ", ".join(mf.path.name for mf in gone),
        )
        return len(gone)

    def close(self) -> None:
        """Close every file (shutdown, once the flush thread has stopped; or start-up)."""
        for f in self.files:
            f.close()
        self.files = []
        self._cur = None


def _matches(record: memoryview, topic: str, key: str, begin_ms: int, end_ms: int, unique: bool) -> bool:
    """Whether the record really is one the query asks for (hashes collide; time is per record)."""
    try:
        rec = decode_record_at(record, 0, len(record))
    except RecordError:
        return False
    if rec.topic != topic or not begin_ms <= rec.store_timestamp <= end_ms:
        return False
    props = decode_properties(rec.properties)
    if unique:
        return props.get("UNIQ_KEY") == key
    return key in props.get("KEYS", "").split(KEY_SEPARATOR)


def is_record_boundary(cl: CommitLog, offset: int) -> bool:
    """Whether a record, a segment's blank filler, a segment or the log's end starts at *offset*."""
    if offset == cl.max_offset or cl.record_at(offset) is not None:
        return True
    seg = cl.segment_for(offset)
    if seg is None:
        return False
    rel = offset - seg.start
    if rel == 0:
        return True
    if seg.size - rel < 8:
        return False
    total, magic = _SIZE_MAGIC.unpack_from(seg.mm, rel)
    return bool(magic == BLANK_MAGIC_CODE and total == seg.size - rel)
