"""traceTopicEnable: the broker creates the message trace topic at start, as RocketMQ's does."""

from __future__ import annotations

from pathlib import Path

import pytest
from _support import broker_config, run, running_broker

from cometmq.errors import ConfigError
from cometmq.protocol.naming import TRACE_TOPIC


def test_the_trace_topic_is_made_only_when_asked(tmp_path: Path) -> None:
    async def go() -> None:
        async with running_broker(tmp_path / "off") as broker:
            assert broker.topics.get(TRACE_TOPIC) is None
        async with running_broker(tmp_path / "on", traceTopicEnable=True) as broker:
            topic = broker.topics.get(TRACE_TOPIC)
            assert topic is not None
            assert (topic.read_queue_nums, topic.write_queue_nums) == (1, 1)
            assert TRACE_TOPIC in broker.topics.register_body().topic_configs

    run(go())


def test_a_chosen_trace_topic_name_is_made_instead(tmp_path: Path) -> None:
    async def go() -> None:
        async with running_broker(tmp_path, traceTopicEnable=True, msgTraceTopicName="OpsTraces") as broker:
            assert broker.topics.get("OpsTraces") is not None
            assert broker.topics.get(TRACE_TOPIC) is None

    run(go())


def test_a_trace_topic_name_that_is_no_topic_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="msgTraceTopicName"):
        broker_config(tmp_path, traceTopicEnable=True, msgTraceTopicName="bad name")
