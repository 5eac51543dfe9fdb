"""The broker's header declarations: RocketMQ's names and defaults, their limits, nullable fields."""

from __future__ import annotations

import inspect

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.errors import HeaderError
from cometmq.protocol import broker_headers
from cometmq.protocol.broker_headers import (
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from cometmq.protocol.headers import Header

DECLARED = [
    cls
    for _, cls in inspect.getmembers(broker_headers, inspect.isclass)
    if issubclass(cls, Header) and cls is not Header
]
# Wire names of many declarations, and one of none.
WIRE_NAMES = [
    "topic", "queueId", "queueOffset", "offset", "consumerGroup", "group", "timestamp", "maxNum", "key",
    "beginTimestamp", "endTimestamp", "msgId", "isForce", "readQueueNums", "groupName", "clientID", "x",
]  # fmt: skip


@pytest.mark.parametrize(
    ("count", "accepted"), [("0", False), ("1", True), ("1024", True), ("1025", False), ("-3", False)]
)
def test_a_pull_asks_for_1_to_1024_messages(count: str, accepted: bool) -> None:
    fields = {"consumerGroup": "g", "topic": "t", "queueId": "0", "queueOffset": "0", "maxMsgNums": count}
    if accepted:
        assert PullMessageRequestHeader.decode(fields).max_msg_nums == int(count)
    else:
        with pytest.raises(HeaderError, match=f"maxMsgNums={count} is (below 1|above 1024)"):
            PullMessageRequestHeader.decode(fields)


def test_a_pull_without_commit_offset_or_suspend_time_commits_nothing_and_holds_15_s() -> None:
    pull = PullMessageRequestHeader.decode(
        {"consumerGroup": "g", "topic": "t", "queueId": "0", "queueOffset": "0"}
    )
    assert (pull.commit_offset, pull.suspend_timeout_millis, pull.sys_flag) == (-1, 15000, 0)


def test_the_send_answer_carries_region_and_trace_switch_beside_rocketmq_fields() -> None:
    answer = SendMessageResponseHeader(
        msg_id="ID", queue_id=1, queue_offset=7, msg_region="DefaultRegion", trace_on=False
    )
    fields = answer.encode()
    assert fields == {
        "msgId": "ID",
        "queueId": "1",
        "queueOffset": "7",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "false",
    }
    assert SendMessageResponseHeader.decode(fields) == answer


def test_the_send_header_needs_its_queue_id_and_takes_a_negative_one() -> None:
    with pytest.raises(HeaderError, match="queueId is missing"):
        SendMessageRequestHeader.decode({"a": "p", "b": "t"}, compact=True)
    sent = SendMessageRequestHeader.decode({"a": "p", "b": "t", "e": "-1"}, compact=True)
    assert (sent.queue_id, sent.default_topic, sent.default_topic_queue_nums) == (-1, "TBW102", 4)
    assert sent.reconsume_times is None and sent.max_reconsume_times is None


def test_a_reset_is_forced_and_for_every_queue_unless_it_says_otherwise() -> None:
    reset = ResetOffsetRequestHeader.decode({"topic": "t", "group": "g", "timestamp": "-1"})
    assert (reset.is_force, reset.queue_id, reset.offset) == (True, None, None)
    fields = ResetOffsetRequestHeader(topic="t", group="g", timestamp=5, is_force=False).encode()
    assert fields == {"topic": "t", "group": "g", "timestamp": "5", "isForce": "false"}


def test_queue_numbers_of_a_new_topic_are_1_to_1024_or_left_to_the_broker() -> None:
    assert CreateTopicRequestHeader.decode({"topic": "t"}).read_queue_nums is None
    with pytest.raises(HeaderError, match="writeQueueNums=1025 is above 1024"):
        CreateTopicRequestHeader.decode({"topic": "t", "writeQueueNums": "1025"})


def test_the_unique_key_flag_of_a_query_is_read_as_rocketmq_writes_it() -> None:
    fields = {"topic": "t", "key": "k", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "1"}
    assert QueryMessageRequestHeader.decode(fields).unique_key_query is False
    assert QueryMessageRequestHeader.decode({**fields, "_UNIQUE_KEY_QUERY": "true"}).unique_key_query is True


def test_every_pull_answer_field_but_the_suggested_broker_is_required() -> None:
    with pytest.raises(HeaderError, match="nextBeginOffset is missing"):
        PullMessageResponseHeader.decode({"minOffset": "0", "maxOffset": "0"})


@pytest.mark.parametrize("cls", DECLARED, ids=lambda cls: cls.__name__)
@given(
    fields=st.dictionaries(
        st.sampled_from(WIRE_NAMES), st.one_of(st.text(max_size=12), st.integers().map(str)), max_size=8
    )
)
def test_any_fields_decode_or_raise_one_header_error_and_round_trip(
    cls: type[Header], fields: dict[str, str]
) -> None:
    try:
        decoded = cls.decode(fields)
    except HeaderError:
        return
    assert cls.decode(decoded.encode()) == decoded
