"""Value objects of the store's API: configuration, what goes in, what comes out."""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cometmq.protocol.properties import KEY_SEPARATOR

__all__ = [
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "MessageBatch",
    "MessageToStore",
    "PutResult",
    "PutStatus",
    "QueryResult",
    "StoreConfig",
]


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass(slots=True)
class StoreConfig:
    """Store settings; names follow RocketMQ's MessageStoreConfig keys."""

    root_dir: Path
    mapped_file_size_commitlog: int = 1 << 30
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commitlog_ms: int = 500
    flush_commitlog_least_pages: int = 4
    sync_flush_timeout_ms: int = 5000
    max_message_size: int = 4 * 1024 * 1024
    # RocketMQ 5's record CRC (docs/store.md, "Record CRC"): append it to every record written, and
    # make recovery drop a record that lacks one. Both off, as in RocketMQ.
    enabled_append_prop_crc: bool = False
    force_verify_prop_crc: bool = False
    # RocketMQ's messageDelayLevel: the store needs it because a SCHEDULE_TOPIC_XXXX unit's tags code
    # is the delivery time, computed from the store timestamp (on put and again on recovery).
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    # The message index (``store._index``; docs/store.md, "Index"): RocketMQ's key names and defaults.
    message_index_enable: bool = True
    max_index_num: int = 20_000_000  # entries per index file (12 bytes each: a 240 MB sparse file)
    # Retention and the disk guard (``store._clean``; docs/store.md, "Retention and the disk guard").
    file_reserved_time: int = 72  # hours a segment is kept after its last write
    delete_when: str = "04"  # local hours (";"-separated) at which expired segments are deleted
    disk_max_used_space_ratio: int = 75  # %: above it expired segments go at any hour
    disk_space_clean_forcibly_ratio: int = 85  # %: above it segments go whatever their age
    disk_space_warning_level_ratio: int = 90  # %: above it writes are refused
    clean_file_forcibly_enable: bool = True
    delete_file_batch_max: int = 10  # segments deleted per pass at most
    # Used fraction (0..1) of the filesystem holding the given directory; None measures it with
    # os.statvfs. Tests inject a probe to simulate a full disk.
    disk_usage_probe: Callable[[Path], float] | None = None


@dataclass(slots=True)
class MessageToStore:
    """What the broker hands the store. Hosts are 8 bytes: IPv4 address + int32 port
    (``cometmq.protocol.record.encode_host``); *properties* is the encoded properties string.

    *tags_code* must be ``java_string_hash(TAGS)`` (0 without a tag): crash recovery recomputes it
    that way from the stored properties. In SCHEDULE_TOPIC_XXXX the store ignores it and uses the
    delivery time (store time + delay of the DELAY level); in rmq_sys_wheel_timer it must be the
    TIMER_OUT_MS property (the delivery time), which recovery reads back.

    *keys* and *uniq_key* must equal the KEYS and UNIQ_KEY properties ("" without them): the index
    takes them from here on put, and recovery recomputes them from the record.
    """

    topic: str
    queue_id: int
    flag: int
    body: bytes
    properties: str
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_host: bytes
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    tags_code: int = 0
    keys: str = ""
    uniq_key: str = ""


def index_names(uniq_key: str, keys: str) -> list[str]:
    """The names the index files a message under, in order: its UNIQ_KEY, then each KEYS entry
    (split at spaces; empty names are none)."""
    names = keys.split(KEY_SEPARATOR) if keys else []
    if uniq_key:
        names.insert(0, uniq_key)
    if "" in names:
        names = [name for name in names if name]
    return names


# What the messages of a batch must share (a prepared transaction offset, of 0, included).
_SHARED = operator.attrgetter(
    "topic",
    "queue_id",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
)


@dataclass(slots=True)
class MessageBatch:
    """Messages of one topic and queue for ``put_batch``: what they share, then one list item each.

    Lists rather than a ``MessageToStore`` per message: the broker fills them in one pass over a
    SEND_BATCH_MESSAGE body without making an object per message (bench/broker_send.py).

    *properties[i]* is message i's encoded properties as stored and *tags_codes[i]* must be
    ``java_string_hash`` of its TAGS (0 without). *index_keys* are the UTF-8 names the index gets,
    message by message (its UNIQ_KEY, then each of its KEYS), and *index_owners[j]* is the position of
    the message *index_keys[j]* belongs to (so never decreasing). Recovery recomputes all three from
    the stored records.
    """

    topic: str
    queue_id: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_host: bytes
    flags: list[int]
    bodies: list[bytes | memoryview]
    properties: list[bytes]
    tags_codes: list[int]
    index_keys: list[bytes] = field(default_factory=list)
    index_owners: list[int] = field(default_factory=list)
    reconsume_times: int = 0

    @classmethod
    def of(cls, msgs: Sequence[MessageToStore]) -> MessageBatch | None:
        """The batch of *msgs*; None when they are none, do not share everything but flag, body and
        properties, or carry properties that cannot be encoded (lone surrogates)."""
        if not msgs:
            return None
        shared = _SHARED(msgs[0])
        topic, queue_id, sys_flag, born_timestamp, born_host, store_host, reconsume_times, prepared = shared
        if prepared:
            return None  # a prepared transaction's offset: never in a batch
        batch = cls(topic, queue_id, sys_flag, born_timestamp, born_host, store_host, [], [], [], [])
        batch.reconsume_times = reconsume_times
        for i, m in enumerate(msgs):
            if _SHARED(m) != shared:
                return None
            try:
                batch.properties.append(m.properties.encode())
            except UnicodeEncodeError:
                return None
            batch.flags.append(m.flag)
            batch.bodies.append(m.body)
            batch.tags_codes.append(m.tags_code)
            for name in index_names(m.uniq_key, m.keys):
                batch.index_keys.append(name.encode("utf-8", "surrogatepass"))
                batch.index_owners.append(i)
        return batch


@dataclass(slots=True)
class QueryResult:
    """Outcome of ``query_messages``: the matching records, newest first.

    *buffers* are slices of the mapped commit log, one record each (write them out as they are and
    drop them soon, like ``GetResult.buffers``). The two ``index_last_update_*`` values describe the
    newest index entry (its record's store time and commit-log offset; 0 without one), as
    QUERY_MESSAGE's reply header does.
    """

    buffers: list[memoryview] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


class PutStatus(enum.Enum):
    PUT_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    MESSAGE_ILLEGAL = 2
    PROPERTIES_SIZE_EXCEEDED = 3
    SERVICE_NOT_AVAILABLE = 4
    UNKNOWN_ERROR = 5
    # SYNC_MASTER's group transfer (cometmq.replication): stored on the master, not confirmed by a slave.
    FLUSH_SLAVE_TIMEOUT = 6
    SLAVE_NOT_AVAILABLE = 7
    # RocketMQ's CREATE_MAPEDFILE_FAILED: a file the message needs could not be opened (no file
    # descriptor left); that one put is refused, the store keeps taking others.
    CREATE_MAPPED_FILE_FAILED = 8


@dataclass(slots=True)
class PutResult:
    """Outcome of put/put_batch; offsets are those of the first record (-1 when nothing was stored)."""

    status: PutStatus
    commitlog_offset: int
    queue_offset: int
    count: int
    store_timestamp: int
    msg_id_text: str  # the records' offset message ids, comma-separated, as a send's reply carries them
    wrote_bytes: int

    @property
    def msg_ids(self) -> list[str]:
        """The offset message id of each stored record, in order."""
        return self.msg_id_text.split(",") if self.msg_id_text else []

    @property
    def commitlog_end_offset(self) -> int:
        """End of the last stored record: what ``wait_flushed`` needs."""
        return self.commitlog_offset + self.wrote_bytes


class GetStatus(enum.Enum):
    FOUND = 0
    NO_MATCHED_MESSAGE = 1
    MESSAGE_WAS_REMOVING = 2
    OFFSET_FOUND_NULL = 3
    OFFSET_OVERFLOW_BADLY = 4
    OFFSET_OVERFLOW_ONE = 5
    OFFSET_TOO_SMALL = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    NO_MESSAGE_IN_QUEUE = 8


@dataclass(slots=True)
class GetResult:
    """Outcome of get_messages.

    *buffers* are zero-copy slices of the mapped commit log, each one or more whole stored records
    that lie back to back in one segment (a run of a batch; fewer iovecs for the pull's writev); write
    them out as they are (a pull body is the records concatenated) and drop them soon: while any is
    alive the segment cannot be unmapped. *message_count* records, *buffer_total_size* bytes in all.
    """

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = field(default_factory=list)
    message_count: int = 0
    buffer_total_size: int = 0
