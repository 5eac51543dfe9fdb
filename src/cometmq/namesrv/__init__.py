"""The NameServer role: route table, broker liveness and KV config, served over remoting."""

from cometmq.namesrv.server import NameServer

__all__ = ["NameServer"]
