"""The storage engine: commit log, consume queues, flushing and recovery.

It knows nothing of the network: the broker hands it ``MessageToStore`` objects and serves the
``memoryview`` records it gets back. The on-disk format is documented in ``cometmq.store.format``.
"""

from ._model import (
    FlushDiskType,
    GetResult,
    GetStatus,
    MessageToStore,
    PutResult,
    PutStatus,
    StoreConfig,
)
from ._store import ArrivalListener, MessageStore

__all__ = [
    "ArrivalListener",
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "MessageToStore",
    "PutResult",
    "PutStatus",
    "StoreConfig",
]
