"""Automatic failover of a broker group's master, elected through etcd."""

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
    "KeyValue",
    "Put",
    "WatchEvent",
]
