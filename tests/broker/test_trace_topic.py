"""traceTopicEnable: the broker creates the message trace topic at start, as RocketMQ's does."""

from __future__ import annotations

from pathlib import Path

import pytest
from _support import address, broker_config, create_topic, run, running_broker, send_request

from cometmq.errors import ConfigError
from cometmq.protocol import ResponseCode
from cometmq.protocol.naming import TRACE_TOPIC
from cometmq.remoting import RemotingClient


def test_the_trace_topic_is_made_only_when_asked(tmp_path: Path) -> None:
    async def go() -> None:
        async with running_broker(tmp_path / "off") as broker:
            assert broker.topics.get(TRACE_TOPIC) is None
        async with running_broker(tmp_path / "on", traceTopicEnable=True) as broker:
            topic = broker.topics.get(TRACE_TOPIC)
            assert topic is not None
            assert (topic.read_queue_nums, topic.write_queue_nums) == (1, 1)
            assert TRACE_TOPIC in broker.topics.register_body(6).topic_configs

    run(go())


def test_a_chosen_trace_topic_name_is_made_instead(tmp_path: Path) -> None:
    async def go() -> None:
        async with running_broker(tmp_path, traceTopicEnable=True, msgTraceTopicName="OpsTraces") as broker:
            assert broker.topics.get("OpsTraces") is not None
            assert broker.topics.get(TRACE_TOPIC) is None

    run(go())


def test_a_trace_topic_made_before_keeps_its_stored_queues(tmp_path: Path) -> None:
    async def go() -> None:
        async with running_broker(tmp_path) as broker:
            client = RemotingClient()
            try:
                addr = address(broker)
                assert (await create_topic(client, addr, "OwnTraces", 4)).code == ResponseCode.SUCCESS
                for queue_id in range(4):
                    response = await client.invoke(addr, send_request("OwnTraces", b"t", queue_id))
                    assert response.code == ResponseCode.SUCCESS
            finally:
                await client.close()
        async with running_broker(tmp_path, traceTopicEnable=True, msgTraceTopicName="OwnTraces") as broker:
            topic = broker.topics.get("OwnTraces")
            assert topic is not None
            assert (topic.read_queue_nums, topic.write_queue_nums) == (4, 4)
            assert "OwnTraces" in broker.topics.system_topics
        # The built-in one still has its one queue when none was stored.
        async with running_broker(tmp_path, traceTopicEnable=True) as broker:
            topic = broker.topics.get(TRACE_TOPIC)
            assert topic is not None and topic.queue_nums == 1

    run(go())


def test_a_trace_topic_name_that_is_no_topic_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="msgTraceTopicName"):
        broker_config(tmp_path, traceTopicEnable=True, msgTraceTopicName="bad name")
