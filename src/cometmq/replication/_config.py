"""The settings replication reads, under the broker's RocketMQ keys (docs/operations.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    # haMasterAddress: the master's HA address (host:port) a slave uses instead of the one its
    # registration learns; empty: learned.
    master_address: str = ""
    # haSendHeartbeatInterval: a slave reports its offset, and a master sends an empty chunk header,
    # after this long without writing anything else.
    heartbeat_interval_ms: int = 5000
    # haHousekeepingInterval: a link that reads nothing for this long is closed.
    housekeeping_interval_ms: int = 20_000
    # haTransferBatchSize: the largest chunk body a master sends.
    transfer_batch_size: int = 32768
    # haMaxGapNotInSync (4.9: haSlaveFallbehindMax): a slave this far behind is not in sync, and a
    # SYNC_MASTER answers SLAVE_NOT_AVAILABLE rather than wait for it.
    max_gap_not_in_sync: int = 268_435_456
    # slaveTimeout: how long a SYNC_MASTER send waits for a slave (RocketMQ 4.9.3+).
    slave_timeout_ms: int = 3000
    # mappedFileSizeCommitLog, the same on master and slave: a chunk never crosses a segment's end.
    segment_size: int = 1 << 30
    # brokerId: the id a master's in-sync set names it by (the others in the set are its slaves).
    broker_id: int = 0
    # allAckInSyncStateSet: with an in-sync set (failover mode), a SYNC_MASTER send waits for every
    # slave in it (true) or for one (false).
    all_ack_in_sync: bool = True
    # haMaxTimeSlaveNotCatchup: a slave is an in-sync candidate while its acknowledgement reached the
    # master's end within this long.
    max_time_slave_not_catchup_ms: int = 15_000
