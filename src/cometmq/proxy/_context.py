"""What every part of the proxy shares: its settings, its way to the brokers, what it knows of them and
of its clients."""

from __future__ import annotations

from dataclasses import dataclass

from cometmq.client.instance import ClientInstance
from cometmq.proxy._access import Authorizer
from cometmq.proxy._clients import Clients
from cometmq.proxy._config import ProxyConfig
from cometmq.proxy._metadata import Metadata
from cometmq.proxy._routes import Routes


@dataclass(slots=True)
class ProxyContext:
    config: ProxyConfig
    # Routes from the name servers and remoting connections to the brokers, as a 4.x client holds them.
    brokers: ClientInstance
    metadata: Metadata  # topics' message types, groups' retry and FIFO settings
    routes: Routes  # topic routes as the 5.x clients see them, queue selection
    clients: Clients  # the connected 5.x clients: settings, Telemetry streams
    authorizer: Authorizer  # who signed a call, and whether they may do what it does

    @classmethod
    def create(cls, config: ProxyConfig, brokers: ClientInstance) -> ProxyContext:
        metadata = Metadata(brokers)
        routes = Routes(brokers, metadata)
        authorizer = Authorizer(config.access_control)
        clients = Clients(brokers, metadata, routes, authorizer)
        return cls(config, brokers, metadata, routes, clients, authorizer)
