"""The name rules: RocketMQ's characters and lengths for topics and groups, valid text for the other
names, and the header fields that declare them."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.errors import HeaderError
from cometmq.protocol import ResponseCode
from cometmq.protocol.broker_headers import SendMessageRequestHeader, UpdateConsumerOffsetRequestHeader
from cometmq.protocol.namesrv_headers import PutKVConfigRequestHeader
from cometmq.protocol.naming import (
    GROUP_MAX_LENGTH,
    TOPIC_MAX_LENGTH,
    broker_address_error,
    group_name_error,
    stored_topic_name_error,
    text_error,
    topic_filter_type_error,
    topic_name_error,
)

LEGAL = re.compile(r"[%|a-zA-Z0-9_-]+")

# Any text, lone surrogates (what a JSON \u escape can carry; category Cs, which hypothesis leaves out
# unless asked) included, and legal names of any length around the limits.
_name_chars = st.characters() | st.characters(categories=["Cs"]) | st.sampled_from("%|_-")
texts = st.text(_name_chars, max_size=300) | st.from_regex(LEGAL, fullmatch=True)


def _encodes(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@given(texts)
def test_a_topic_name_is_legal_exactly_when_rocketmq_allows_it(name: str) -> None:
    legal = bool(LEGAL.fullmatch(name)) and len(name) <= TOPIC_MAX_LENGTH
    assert (topic_name_error(name) is None) == legal


@given(texts)
def test_a_group_name_is_legal_exactly_when_rocketmq_allows_it(name: str) -> None:
    legal = bool(LEGAL.fullmatch(name)) and len(name) <= GROUP_MAX_LENGTH
    assert (group_name_error(name) is None) == legal


@given(texts)
def test_any_text_is_kept_exactly_when_utf_8_can_hold_it(name: str) -> None:
    assert (text_error(name) is None) == _encodes(name)


@given(st.sampled_from(["", "%RETRY%", "%DLQ%"]), texts)
def test_a_stored_topic_is_a_legal_topic_or_a_legal_groups_retry_or_dead_letter_topic(
    prefix: str, name: str
) -> None:
    topic = prefix + name
    expected = topic_name_error(topic) is None or (
        prefix != "" and name != "" and group_name_error(name) is None
    )
    assert (stored_topic_name_error(topic) is None) == expected


def test_a_retry_topic_may_be_longer_than_a_topic_as_its_group_may() -> None:
    group = "G" * GROUP_MAX_LENGTH
    assert topic_name_error("%RETRY%" + group) is not None
    assert stored_topic_name_error("%RETRY%" + group) is None
    assert stored_topic_name_error("%RETRY%" + group + "G") is not None


@given(texts)
def test_a_declared_name_field_decodes_a_legal_name_or_refuses_it_with_a_readable_remark(name: str) -> None:
    fields = {"consumerGroup": name, "topic": "T", "queueId": "0", "commitOffset": "1"}
    try:
        update = UpdateConsumerOffsetRequestHeader.decode(fields)
    except HeaderError as refused:
        assert group_name_error(name) is not None
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert refused.remark.startswith("consumerGroup[")
        assert _encodes(refused.remark)
        return
    assert update.consumer_group == name and group_name_error(name) is None


@given(texts)
def test_a_kv_key_is_any_text_utf_8_can_hold(key: str) -> None:
    fields = {"namespace": "ns", "key": key, "value": "v"}
    if _encodes(key):
        assert PutKVConfigRequestHeader.decode(fields).key == key
    else:
        with pytest.raises(HeaderError, match=r"^code 1: key\[.*not valid text"):
            PutKVConfigRequestHeader.decode(fields)


def test_the_send_header_refuses_a_bad_topic_under_its_compact_name_as_rocketmq_words_it() -> None:
    with pytest.raises(HeaderError) as refused:
        SendMessageRequestHeader.decode({"a": "P", "b": "bad topic", "e": "0"}, compact=True)
    assert refused.value.remark == (
        "topic[bad topic]: The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    )


@pytest.mark.parametrize("address", ["127.0.0.1:10911", "broker-a.example:1", "[::1]:65535"])
def test_a_broker_address_is_host_colon_port(address: str) -> None:
    assert broker_address_error(address) is None


@pytest.mark.parametrize(
    "address", ["1.5", "65536", "host:", ":10911", "h:0", "h:65536", "h:1x", "a b:1", "h\ud800:1"]
)
def test_a_broker_address_clients_could_not_connect_to_is_refused(address: str) -> None:
    assert broker_address_error(address) is not None


def test_a_topic_filter_type_is_one_of_rocketmqs_two() -> None:
    assert topic_filter_type_error("SINGLE_TAG") is None and topic_filter_type_error("MULTI_TAG") is None
    assert topic_filter_type_error("single_tag") == "The topic filter type must be SINGLE_TAG or MULTI_TAG."
