"""Speaking to a NameServer the way brokers and tools do, for the tests."""

from __future__ import annotations

from collections.abc import Mapping

from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.protocol.headers import Header
from cometmq.protocol.namesrv_headers import GetRouteInfoRequestHeader, RegisterBrokerRequestHeader
from cometmq.protocol.route import DataVersion, RegisterBrokerBody
from cometmq.protocol.topic_config import TopicConfig
from cometmq.remoting import RemotingClient


def addr_of(server: NameServer) -> str:
    return f"127.0.0.1:{server.port}"


async def register(
    client: RemotingClient,
    namesrv_addr: str,
    *,
    broker_name: str = "broker-a",
    broker_addr: str = "127.0.0.1:10911",
    broker_id: int = 0,
    cluster: str = "DefaultCluster",
    topics: Mapping[str, int | TopicConfig] | None = None,
    counter: int = 1,
    compressed: bool = False,
    body_crc32: int = 0,
) -> RemotingCommand:
    """REGISTER_BROKER as a broker sends it; ``topics`` maps topic name → queue count (or its whole
    TopicConfig)."""
    configs = {
        name: spec if isinstance(spec, TopicConfig) else TopicConfig(name, spec, spec)
        for name, spec in (topics if topics is not None else {"TopicTest": 4}).items()
    }
    body = RegisterBrokerBody(DataVersion(timestamp=1_700_000_000_000, counter=counter), configs).encode(
        compressed=compressed
    )
    header = RegisterBrokerRequestHeader(
        broker_name=broker_name,
        broker_addr=broker_addr,
        cluster_name=cluster,
        ha_server_addr=broker_addr.rsplit(":", 1)[0] + ":10912",
        broker_id=broker_id,
        compressed=compressed,
        body_crc32=body_crc32,
    )
    request = RemotingCommand(code=RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=body)
    return await client.invoke(namesrv_addr, request)


async def ask(
    client: RemotingClient, namesrv_addr: str, code: int, header: Header | None = None, version: int = 409
) -> RemotingCommand:
    """A request as a client or tool of RocketMQ *version* sends it (409: 4.9.8)."""
    ext_fields = header.encode() if header is not None else {}
    request = RemotingCommand(code=code, ext_fields=ext_fields, version=version)
    return await client.invoke(namesrv_addr, request)


async def ask_route(
    client: RemotingClient, namesrv_addr: str, topic: str, version: int = 409
) -> RemotingCommand:
    """GET_ROUTEINFO_BY_TOPIC for *topic*."""
    header = GetRouteInfoRequestHeader(topic=topic)
    return await ask(client, namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, header, version)
