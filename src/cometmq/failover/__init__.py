"""Automatic failover of a broker group's master, elected through etcd.

Every broker of a group in failover mode runs a :class:`Failover`: it holds a lease in etcd, reports
itself under it, follows the master whose ``leader`` key it finds, and when that key is gone (the master
stopped renewing its lease) takes part in electing the next one among the in-sync members. The broker
takes the roles it is told through the :class:`ReplicaNode` methods it implements.
"""

from ._election import Failover, FailoverStatus, LeaderInfo, ReplicaNode, lease_trusted_until
from ._etcd import (
    Compare,
    Delete,
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    EventType,
    KeyValue,
    Put,
    WatchEvent,
)

__all__ = [
    "Compare",
    "Delete",
    "EtcdClient",
    "EtcdError",
    "EtcdUnavailable",
    "EventType",
    "Failover",
    "FailoverStatus",
    "KeyValue",
    "LeaderInfo",
    "Put",
    "ReplicaNode",
    "WatchEvent",
    "lease_trusted_until",
]
