"""The storage engine: commit log, consume queues, message index, flushing and recovery.

It knows nothing of the network: the broker hands it a ``MessageToStore`` per message (a
``MessageBatch`` for a batch) and serves the ``memoryview`` records it gets back. The on-disk
format is documented in ``cometmq.store.format``.
"""

from cometmq.errors import ReplicaOffsetError, StoreError

from ._clean import CleanReport, parse_delete_when
from ._epochs import EpochEntry, consistent_end
from ._model import (
    FlushDiskType,
    GetResult,
    GetStatus,
    MessageBatch,
    MessageToStore,
    PutResult,
    PutStatus,
    QueryResult,
    StoreConfig,
)
from ._store import ArrivalListener, MessageStore, parse_delay_levels

__all__ = [
    "ArrivalListener",
    "CleanReport",
    "EpochEntry",
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "MessageBatch",
    "MessageStore",
    "MessageToStore",
    "PutResult",
    "PutStatus",
    "QueryResult",
    "ReplicaOffsetError",
    "StoreConfig",
    "StoreError",
    "consistent_end",
    "parse_delay_levels",
    "parse_delete_when",
]
