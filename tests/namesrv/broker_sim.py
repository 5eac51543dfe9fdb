"""Speaking to a NameServer the way brokers and tools do, for the tests."""

from __future__ import annotations

from collections.abc import Mapping

from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode
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
    body_crc32: int | None = None,
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
    ext_fields = {
        "brokerName": broker_name,
        "brokerAddr": broker_addr,
        "clusterName": cluster,
        "haServerAddr": broker_addr.rsplit(":", 1)[0] + ":10912",
        "brokerId": str(broker_id),
        "compressed": "true" if compressed else "false",
    }
    if body_crc32 is not None:
        ext_fields["bodyCrc32"] = str(body_crc32)
    request = RemotingCommand(code=RequestCode.REGISTER_BROKER, ext_fields=ext_fields, body=body)
    return await client.invoke(namesrv_addr, request)


async def ask(
    client: RemotingClient, namesrv_addr: str, code: int, version: int = 409, **fields: str
) -> RemotingCommand:
    request = RemotingCommand(code=code, ext_fields=dict(fields), version=version)
    return await client.invoke(namesrv_addr, request)
