"""What every part of the proxy shares: its settings and its way to the brokers."""

from __future__ import annotations

from dataclasses import dataclass

from cometmq.client.instance import ClientInstance
from cometmq.proxy._config import ProxyConfig


@dataclass(slots=True)
class ProxyContext:
    config: ProxyConfig
    # Routes from the name servers and remoting connections to the brokers, as a 4.x client holds them.
    brokers: ClientInstance
