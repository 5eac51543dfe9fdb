"""The broker's connection limits come from broker.conf (serverChannelMaxIdleTimeSeconds and the
others in docs/operations.md, "Connection limits"), and apply to its clients."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _support import address, broker_and_client, create_topic, run

from cometmq.broker.config import BrokerConfig
from cometmq.errors import ConfigError
from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.remoting import ServerLimits


def test_broker_conf_keys_set_the_servers_limits() -> None:
    config = BrokerConfig()
    config.update(
        {
            "serverChannelMaxIdleTimeSeconds": "30",
            "serverSocketBacklog": "2048",
            "serverMaxConnections": "500",
            "serverMaxPartialFrameBytes": str(64 << 20),
        }
    )
    assert config.server_limits() == ServerLimits(
        channel_max_idle_s=30, max_connections=500, max_partial_frame_bytes=64 << 20, socket_backlog=2048
    )


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("serverChannelMaxIdleTimeSeconds", "-1", "is negative"),
        ("serverMaxConnections", "0", "is not a positive number"),
        ("serverSocketBacklog", "0", "is not a positive number"),
        ("serverMaxPartialFrameBytes", "1048576", "less than one frame of the largest size"),
    ],
)
def test_a_limit_out_of_range_is_refused_naming_its_key(key: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"{key} .*{problem}"):
        BrokerConfig().update({key: value})


def test_a_broker_closes_a_connection_idle_past_its_limit(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker_and_client(tmp_path, serverChannelMaxIdleTimeSeconds=1) as (broker, addr, client):
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            silent = asyncio.ensure_future(reader.read(65536))
            busy = RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO)
            while not silent.done():  # the client keeps busy until the silent connection is closed
                assert (await client.invoke(addr, busy)).code == 0
            assert silent.result() == b""
            assert (await create_topic(client, address(broker), "IdleLimitLast", 1)).code == 0
            writer.close()

    run(main())
