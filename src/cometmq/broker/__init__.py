"""The Broker: request processors, topic/group/offset bookkeeping, around the store."""

from cometmq.broker._stats import BrokerStats
from cometmq.broker.broker import Broker
from cometmq.broker.config import DEFAULT_DATA_DIR, BrokerConfig, BrokerRole

__all__ = ["DEFAULT_DATA_DIR", "Broker", "BrokerConfig", "BrokerRole", "BrokerStats"]
