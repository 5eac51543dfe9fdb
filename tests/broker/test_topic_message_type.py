"""RocketMQ 5's topic attribute ``message.type`` on a real broker: MIXED only with enableMixedMessageType,
and the type a topic carries (NORMAL when none) as the broker's table holds it."""

from __future__ import annotations

from pathlib import Path

from _support import broker_and_client, create_topic, run

from cometmq.protocol import ResponseCode
from cometmq.protocol.topic_config import TopicMessageType


def test_mixed_is_refused_unless_the_broker_enables_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path / "default") as (broker, addr, client):
            refused = await create_topic(client, addr, "Mixed", 1, attributes="+message.type=MIXED")
            assert (refused.code, refused.remark) == (
                ResponseCode.INVALID_PARAMETER,
                "MIXED message type is not supported.",
            )
            assert broker.topics.get("Mixed") is None
            fifo = await create_topic(client, addr, "Fifo", 1, attributes="+message.type=FIFO")
            assert fifo.code == ResponseCode.SUCCESS, fifo.remark
            plain = await create_topic(client, addr, "Plain", 1)
            assert plain.code == ResponseCode.SUCCESS, plain.remark
            fifo_config, plain_config = broker.topics.get("Fifo"), broker.topics.get("Plain")
            assert fifo_config is not None and fifo_config.message_type is TopicMessageType.FIFO
            assert plain_config is not None and plain_config.message_type is TopicMessageType.NORMAL
        async with broker_and_client(tmp_path / "mixed", enableMixedMessageType="true") as (
            broker,
            addr,
            client,
        ):
            taken = await create_topic(client, addr, "Mixed", 1, attributes="+message.type=MIXED")
            assert taken.code == ResponseCode.SUCCESS, taken.remark
            config = broker.topics.get("Mixed")
            assert config is not None and config.message_type is TopicMessageType.MIXED

    run(scenario())
