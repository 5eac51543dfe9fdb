"""The typed header declarations: decoding checks presence, Java type and range once."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.errors import HeaderError
from cometmq.protocol import ResponseCode
from cometmq.protocol.broker_headers import PullMessageRequestHeader, SendMessageRequestHeader
from cometmq.protocol.headers import Header, JavaInt, JavaString, header, wire

PULL_FIELDS = {
    "consumerGroup": "g",
    "topic": "t",
    "queueId": "3",
    "queueOffset": "17",
    "maxMsgNums": "32",
    "sysFlag": "0",
    "commitOffset": "0",
    "suspendTimeoutMillis": "15000",
    "subVersion": "0",
}
SEND_FIELDS = {"a": "p", "b": "t", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0"}


def test_a_header_decodes_its_fields_with_their_types_and_defaults() -> None:
    pull = PullMessageRequestHeader.decode(PULL_FIELDS)
    assert (pull.consumer_group, pull.topic, pull.queue_id, pull.queue_offset) == ("g", "t", 3, 17)
    assert pull.max_msg_nums == 32 and pull.subscription is None


def test_a_missing_field_is_named() -> None:
    with pytest.raises(HeaderError) as raised:
        PullMessageRequestHeader.decode({"topic": "t", "queueId": "1", "queueOffset": "0"})
    assert raised.value.code == ResponseCode.SYSTEM_ERROR
    assert "consumerGroup is missing" in raised.value.remark


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("queueId", "x", "queueId='x' is not a Java int"),
        ("queueId", str(2**31), f"queueId={2**31} is above the Java range"),
        ("queueOffset", str(2**63), f"queueOffset={2**63} is above the Java range"),
        ("queueOffset", "1.5", "is not a Java long"),
    ],
)
def test_a_number_that_is_not_of_its_java_type_is_refused(name: str, text: str, words: str) -> None:
    with pytest.raises(HeaderError, match=words):
        PullMessageRequestHeader.decode({**PULL_FIELDS, name: text})


@header
class _Bounded(Header):
    count: JavaInt = wire("count", minimum=1, maximum=100)
    name: JavaString = wire("name", name_rule=lambda text: "too long" if len(text) > 5 else None)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"count": "0", "name": "a"}, "count=0 is below 1"),
        ({"count": "101", "name": "a"}, "count=101 is above 100"),
        ({"count": "5", "name": "abcdef"}, "too long"),
    ],
)
def test_declared_limits_are_checked(fields: dict[str, str], words: str) -> None:
    with pytest.raises(HeaderError, match=words):
        _Bounded.decode(fields)


def test_the_send_header_reads_and_writes_its_compact_names() -> None:
    sent = SendMessageRequestHeader(
        producer_group="p",
        topic="t",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=2,
        sys_flag=0,
        born_timestamp=1,
        flag=0,
        batch=True,
        properties="a\x01b\x02",
    )
    compact = sent.encode(compact=True)
    assert compact["a"] == "p" and compact["b"] == "t" and compact["e"] == "2" and compact["m"] == "true"
    assert "j" not in compact  # None fields are left out
    assert SendMessageRequestHeader.decode(compact, compact=True) == sent
    assert SendMessageRequestHeader.decode(sent.encode()) == sent


def test_booleans_read_as_java_and_the_cpp_client_write_them() -> None:
    for text, value in (("true", True), ("TRUE", True), ("1", True), ("false", False), ("yes", False)):
        assert SendMessageRequestHeader.decode({**SEND_FIELDS, "m": text}, compact=True).batch is value


def test_a_field_declared_without_a_java_type_is_refused_at_declaration() -> None:
    with pytest.raises(TypeError):

        @header
        class _Untyped(Header):
            count: int = wire("count")


@given(
    st.dictionaries(
        st.sampled_from([*PULL_FIELDS, "x"]),
        st.text(max_size=30),
    )
)
def test_any_fields_decode_or_raise_one_header_error(fields: dict[str, str]) -> None:
    try:
        pull = PullMessageRequestHeader.decode(fields)
    except HeaderError:
        return
    assert PullMessageRequestHeader.decode(pull.encode()) == pull


@given(
    st.builds(
        PullMessageRequestHeader,
        consumer_group=st.from_regex(r"[%|a-zA-Z0-9_-]{1,255}", fullmatch=True),
        topic=st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True),
        queue_id=st.integers(0, 2**31 - 1),
        queue_offset=st.integers(-(2**63), 2**63 - 1),
        max_msg_nums=st.integers(1, 1024),
        sys_flag=st.integers(0, 15),
        commit_offset=st.integers(-(2**63), 2**63 - 1),
        suspend_timeout_millis=st.integers(0, 2**63 - 1),
        sub_version=st.integers(-(2**63), 2**63 - 1),
        subscription=st.none() | st.text(),
    )
)
def test_every_header_round_trips(pull: PullMessageRequestHeader) -> None:
    assert PullMessageRequestHeader.decode(pull.encode()) == pull
