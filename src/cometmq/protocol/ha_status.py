"""The body of GET_BROKER_HA_STATUS (907): a broker's replication state, in RocketMQ 5's
``HARuntimeInfo`` JSON shape, so that RocketMQ's ``mqadmin haStatus`` and CometMQ's
``cometmq broker ha-status`` read the same answer.

A master fills ``ha_connection_info`` (one entry per connected slave); a slave fills
``ha_client_runtime_info`` (its link to the master). Offsets are commit-log byte offsets; timestamps are
milliseconds since the epoch.

``epoch``, ``inSyncReplicas`` and ``failover`` are CometMQ's own fields (a Java admin tool ignores
them): the broker's master epoch (the last of its epoch history; 0 before any), the in-sync set as
committed in etcd (broker ids, the master's included; empty outside failover mode), and whether the
broker runs in failover mode.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cometmq.errors import ProtocolError
from cometmq.protocol import fastjson
from cometmq.protocol.jsonbody import (
    BodyError,
    as_object,
    java_bool,
    java_int,
    java_list,
    java_long,
    java_string,
)

__all__ = ["HAClientRuntimeInfo", "HAConnectionRuntimeInfo", "HARuntimeInfo"]

# More slaves than any broker group has; bounds what a client decodes from an answer.
_MAX_CONNECTIONS = 1024


@dataclass(slots=True)
class HAConnectionRuntimeInfo:
    """A master's view of one connected slave."""

    addr: str  # the slave's host:port as the master's socket sees it
    slave_ack_offset: int  # the largest commit-log offset the slave has confirmed
    diff: int  # master's commit-log end minus ``slave_ack_offset``
    in_sync: bool  # diff below haMaxGapNotInSync
    transferred_byte_in_second: int
    transfer_from_where: int  # the next commit-log offset the master sends this slave

    def to_json(self) -> dict[str, Any]:
        return {
            "addr": self.addr,
            "slaveAckOffset": self.slave_ack_offset,
            "diff": self.diff,
            "inSync": self.in_sync,
            "transferredByteInSecond": self.transferred_byte_in_second,
            "transferFromWhere": self.transfer_from_where,
        }

    @classmethod
    def from_json(cls, obj: Any) -> HAConnectionRuntimeInfo:
        what = "HAConnectionRuntimeInfo"
        obj = as_object(obj, what)
        return cls(
            addr=java_string(obj, "addr", what, default=""),
            slave_ack_offset=java_long(obj, "slaveAckOffset", what, default=0),
            diff=java_long(obj, "diff", what, default=0),
            in_sync=java_bool(obj, "inSync", what, default=False),
            transferred_byte_in_second=java_long(obj, "transferredByteInSecond", what, default=0),
            transfer_from_where=java_long(obj, "transferFromWhere", what, default=0),
        )


@dataclass(slots=True)
class HAClientRuntimeInfo:
    """A slave's view of its link to the master."""

    master_addr: str = ""  # the master's HA address (host:haListenPort); empty while unknown
    transferred_byte_in_second: int = 0
    max_offset: int = 0  # the slave's own commit-log end
    last_read_timestamp: int = 0  # when bytes last came from the master (0: never)
    last_write_timestamp: int = 0  # when the slave last reported its offset (0: never)
    master_flush_offset: int = 0
    is_activated: bool = False  # connected to the master

    def to_json(self) -> dict[str, Any]:
        return {
            "masterAddr": self.master_addr,
            "transferredByteInSecond": self.transferred_byte_in_second,
            "maxOffset": self.max_offset,
            "lastReadTimestamp": self.last_read_timestamp,
            "lastWriteTimestamp": self.last_write_timestamp,
            "masterFlushOffset": self.master_flush_offset,
            "isActivated": self.is_activated,
        }

    @classmethod
    def from_json(cls, obj: Any) -> HAClientRuntimeInfo:
        what = "HAClientRuntimeInfo"
        obj = as_object(obj, what)
        return cls(
            master_addr=java_string(obj, "masterAddr", what, default=""),
            transferred_byte_in_second=java_long(obj, "transferredByteInSecond", what, default=0),
            max_offset=java_long(obj, "maxOffset", what, default=0),
            last_read_timestamp=java_long(obj, "lastReadTimestamp", what, default=0),
            last_write_timestamp=java_long(obj, "lastWriteTimestamp", what, default=0),
            master_flush_offset=java_long(obj, "masterFlushOffset", what, default=0),
            # Java's getter for a boolean ``isActivated`` is ``isActivated()``: fastjson names it
            # ``activated``; RocketMQ's own JSON carries either.
            is_activated=java_bool(
                obj, "isActivated", what, default=java_bool(obj, "activated", what, default=False)
            ),
        )


@dataclass(slots=True)
class HARuntimeInfo:
    """A broker's replication state: the answer to GET_BROKER_HA_STATUS."""

    master: bool
    master_commit_log_max_offset: int  # on a master its commit-log end; on a slave the master's last known
    in_sync_slave_nums: int = 0
    ha_connection_info: list[HAConnectionRuntimeInfo] = field(default_factory=list)
    ha_client_runtime_info: HAClientRuntimeInfo = field(default_factory=HAClientRuntimeInfo)
    epoch: int = 0
    in_sync_replicas: list[int] = field(default_factory=list)
    failover: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "master": self.master,
            "masterCommitLogMaxOffset": self.master_commit_log_max_offset,
            "inSyncSlaveNums": self.in_sync_slave_nums,
            "haConnectionInfo": [c.to_json() for c in self.ha_connection_info],
            "haClientRuntimeInfo": self.ha_client_runtime_info.to_json(),
            "epoch": self.epoch,
            "inSyncReplicas": self.in_sync_replicas,
            "failover": self.failover,
        }

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_json())

    @classmethod
    def from_json(cls, obj: Any) -> HARuntimeInfo:
        what = "HARuntimeInfo"
        obj = as_object(obj, what)
        client = obj.get("haClientRuntimeInfo")
        return cls(
            master=java_bool(obj, "master", what, default=False),
            master_commit_log_max_offset=java_long(obj, "masterCommitLogMaxOffset", what, default=0),
            in_sync_slave_nums=java_int(obj, "inSyncSlaveNums", what, default=0, minimum=0),
            ha_connection_info=[
                HAConnectionRuntimeInfo.from_json(c)
                for c in java_list(obj, "haConnectionInfo", what, max_items=_MAX_CONNECTIONS)
            ],
            ha_client_runtime_info=HAClientRuntimeInfo()
            if client is None
            else HAClientRuntimeInfo.from_json(client),
            epoch=java_long(obj, "epoch", what, default=0),
            in_sync_replicas=[
                java_long({"id": item}, "id", f"{what} inSyncReplicas", minimum=0)
                for item in java_list(obj, "inSyncReplicas", what, max_items=_MAX_CONNECTIONS)
            ],
            failover=java_bool(obj, "failover", what, default=False),
        )

    @classmethod
    def decode(cls, body: bytes) -> HARuntimeInfo:
        """The HA status in an answer's *body*; ProtocolError when it is not one."""
        with _decoding():
            return cls.from_json(fastjson.loads(body))


@contextlib.contextmanager
def _decoding() -> Iterator[None]:
    try:
        yield
    except BodyError as exc:
        raise ProtocolError(f"the HARuntimeInfo is not valid: {exc.remark}") from None
    except (ValueError, TypeError, OverflowError):
        raise ProtocolError("the HARuntimeInfo is not valid JSON") from None
