"""One topic's settings as a broker holds them (GET_TOPIC_CONFIG), its RocketMQ 5 message type among
them, against a real `cometmq standalone`."""

from __future__ import annotations

import pytest
from client_support import run

from cometmq.client import AdminClient
from cometmq.errors import BrokerError
from cometmq.protocol import ResponseCode
from cometmq.protocol.topic_config import TopicMessageType
from processes import StandaloneServer


def test_topic_config_answers_the_message_type_normal_when_the_topic_names_none(
    server: StandaloneServer,
) -> None:
    async def scenario() -> None:
        async with AdminClient(server.namesrv) as admin:
            await admin.create_topic("TypedFifo", 2, attributes="+message.type=FIFO")
            await admin.create_topic("Untyped", 1)
            fifo = await admin.topic_config("TypedFifo")
            assert (fifo.topic_name, fifo.write_queue_nums) == ("TypedFifo", 2)
            assert fifo.message_type is TopicMessageType.FIFO
            assert (await admin.topic_config("Untyped")).message_type is TopicMessageType.NORMAL

            addr = (await admin.topic_route("Untyped")).broker_datas[0].master_addr
            assert addr is not None
            with pytest.raises(BrokerError) as refused:
                await admin.topic_config("NoSuchTopic", broker_addr=addr)
            assert refused.value.code == ResponseCode.TOPIC_NOT_EXIST
            assert refused.value.remark == "No topic in this broker. topic: NoSuchTopic"

    run(scenario())
