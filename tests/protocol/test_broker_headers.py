"""The broker's header declarations: RocketMQ's names, required fields and defaults, their limits,
nullable fields."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.errors import HeaderError
from cometmq.protocol import FrameDecoder, RequestCode, broker_headers
from cometmq.protocol.broker_headers import (
    ConsumerGroupRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    QueueRequestHeader,
    ResetOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from cometmq.protocol.headers import Header
from cometmq.protocol.namesrv_headers import GetRouteInfoRequestHeader

GOLDEN = Path(__file__).parent.parent / "golden" / "frames"
# The declaration of each request the C++ client sent in tests/golden/frames with a header.
GOLDEN_HEADERS: dict[int, type[Header]] = {
    RequestCode.SEND_MESSAGE: SendMessageRequestHeader,
    RequestCode.PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
    RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    RequestCode.GET_MAX_OFFSET: QueueRequestHeader,
    RequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
    RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: ConsumerGroupRequestHeader,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
}

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
PULL_FIELDS = {
    "consumerGroup": "g",
    "topic": "t",
    "queueId": "0",
    "queueOffset": "0",
    "maxMsgNums": "32",
    "sysFlag": "0",
    "commitOffset": "0",
    "suspendTimeoutMillis": "15000",
    "subVersion": "0",
}
SEND_FIELDS = {"a": "p", "b": "t", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0"}


@pytest.mark.parametrize(
    ("count", "accepted"), [("0", False), ("1", True), ("1024", True), ("1025", False), ("-3", False)]
)
def test_a_pull_asks_for_1_to_1024_messages(count: str, accepted: bool) -> None:
    fields = {**PULL_FIELDS, "maxMsgNums": count}
    if accepted:
        assert PullMessageRequestHeader.decode(fields).max_msg_nums == int(count)
    else:
        with pytest.raises(HeaderError, match=f"maxMsgNums={count} is (below 1|above 1024)"):
            PullMessageRequestHeader.decode(fields)


@pytest.mark.parametrize(
    "field", ["maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis", "subVersion"]
)
def test_a_pull_needs_every_field_rocketmq_marks_not_null(field: str) -> None:
    fields = {name: value for name, value in PULL_FIELDS.items() if name != field}
    with pytest.raises(HeaderError, match=f"{field} is missing"):
        PullMessageRequestHeader.decode(fields)
    pull = PullMessageRequestHeader.decode(PULL_FIELDS)
    assert (pull.subscription, pull.expression_type) == (None, None)


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
        SendMessageRequestHeader.decode({k: v for k, v in SEND_FIELDS.items() if k != "e"}, compact=True)
    sent = SendMessageRequestHeader.decode({**SEND_FIELDS, "e": "-1"}, compact=True)
    assert (sent.queue_id, sent.default_topic, sent.default_topic_queue_nums) == (-1, "TBW102", 4)
    assert sent.reconsume_times is None and sent.max_reconsume_times is None
    assert (sent.unit_mode, sent.batch, sent.properties) == (False, False, None)


@pytest.mark.parametrize("letter", "abcdefgh")
def test_the_send_header_needs_every_field_rocketmq_marks_not_null(letter: str) -> None:
    with pytest.raises(HeaderError, match="is missing"):
        SendMessageRequestHeader.decode({k: v for k, v in SEND_FIELDS.items() if k != letter}, compact=True)


def test_a_reset_says_whether_it_is_forced_and_is_for_every_queue_unless_it_names_one() -> None:
    with pytest.raises(HeaderError, match="isForce is missing"):
        ResetOffsetRequestHeader.decode({"topic": "t", "group": "g", "timestamp": "-1"})
    reset = ResetOffsetRequestHeader.decode(
        {"topic": "t", "group": "g", "timestamp": "-1", "isForce": "true"}
    )
    assert (reset.is_force, reset.queue_id, reset.offset) == (True, -1, None)
    fields = ResetOffsetRequestHeader(topic="t", group="g", timestamp=5, is_force=False).encode()
    assert fields == {"topic": "t", "group": "g", "timestamp": "5", "isForce": "false", "queueId": "-1"}


def test_queue_numbers_of_a_new_topic_are_required_and_1_to_1024() -> None:
    fields = {
        "topic": "t",
        "defaultTopic": "TBW102",
        "readQueueNums": "4",
        "writeQueueNums": "4",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    assert CreateTopicRequestHeader.decode(fields).topic_sys_flag == 0
    with pytest.raises(HeaderError, match="readQueueNums is missing"):
        CreateTopicRequestHeader.decode({k: v for k, v in fields.items() if k != "readQueueNums"})
    with pytest.raises(HeaderError, match="writeQueueNums=1025 is above 1024"):
        CreateTopicRequestHeader.decode({**fields, "writeQueueNums": "1025"})


def test_the_unique_key_flag_of_a_query_is_read_as_rocketmq_writes_it() -> None:
    fields = {"topic": "t", "key": "k", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "1"}
    assert QueryMessageRequestHeader.decode(fields).unique_key_query is False
    assert QueryMessageRequestHeader.decode({**fields, "_UNIQUE_KEY_QUERY": "true"}).unique_key_query is True


def test_every_pull_answer_field_is_required() -> None:
    with pytest.raises(HeaderError, match="suggestWhichBrokerId is missing"):
        PullMessageResponseHeader.decode({"nextBeginOffset": "0", "minOffset": "0", "maxOffset": "0"})
    with pytest.raises(HeaderError, match="nextBeginOffset is missing"):
        PullMessageResponseHeader.decode({"suggestWhichBrokerId": "0", "minOffset": "0", "maxOffset": "0"})


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.bin")), ids=lambda path: path.stem)
def test_every_header_the_cpp_client_sends_decodes_with_its_declaration(path: Path) -> None:
    """No field is required that the official C++ client leaves out."""
    (request,) = FrameDecoder().feed(path.read_bytes())
    declared = GOLDEN_HEADERS.get(request.code)
    if declared is None:
        assert not set(request.ext_fields) - {"AccessKey", "OnsChannel", "Signature"}
    else:
        declared.decode(request.ext_fields)


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
