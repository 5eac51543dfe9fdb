"""Master/slave replication, RocketMQ's classic HA: a master streams its commit log to its slaves
over the HA port (``cometmq.protocol.ha``), and a SYNC_MASTER answers a send once a slave has the
message (group transfer).

Everything runs on the broker's event loop: the store keeps its single writer.
"""

from ._config import ReplicationConfig
from ._master import HAServer
from ._slave import HAClient

__all__ = ["HAClient", "HAServer", "ReplicationConfig"]
