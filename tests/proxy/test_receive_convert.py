"""The proxy's receipt handles and the received direction of its message conversion, without a server."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.client.message import ReceivedMessage, decode_pulled
from cometmq.protocol.pop import ExtraInfo, RetryMark
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import encode_host, encode_record_into, record_size
from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy._convert import Refusal, incoming_message
from cometmq.proxy._receive import check_live, parse_receipt_handle

extra_infos = st.builds(
    ExtraInfo,
    ck_queue_offset=st.integers(0, 2**63 - 1),
    pop_time=st.integers(0, 2**63 - 1),
    invisible_time=st.integers(0, 2**63 - 1),
    revive_qid=st.integers(0, 2**31 - 1),
    retry=st.sampled_from(RetryMark),
    broker_name=st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True),
    queue_id=st.integers(0, 2**31 - 1),
    queue_offset=st.integers(0, 2**63 - 1),
)


@given(extra_infos, st.integers(0, 2**63 - 1))
def test_the_proxys_handle_reads_as_the_brokers_with_the_commit_log_offset(
    info: ExtraInfo, commitlog_offset: int
) -> None:
    handle = parse_receipt_handle(f"{info} {commitlog_offset}")
    assert handle == dataclasses.replace(info, commitlog_offset=commitlog_offset)
    assert parse_receipt_handle(str(handle)) == handle


@given(extra_infos)
def test_the_brokers_handle_alone_reads_with_no_commit_log_offset(info: ExtraInfo) -> None:
    assert parse_receipt_handle(str(info)) == info
    assert info.commitlog_offset is None


@given(st.text(max_size=200))
def test_any_text_reads_as_a_handle_or_is_refused_as_an_invalid_one(text: str) -> None:
    try:
        parse_receipt_handle(text)
    except Refusal as refused:
        assert refused.code == v2.Code.INVALID_RECEIPT_HANDLE
        assert refused.message


def test_a_handle_past_its_invisible_time_is_refused_as_expired() -> None:
    handle = parse_receipt_handle("5 1000 30000 0 0 broker-a 1 7 4096")
    with pytest.raises(Refusal) as refused:
        check_live(handle)
    assert refused.value.code == v2.Code.INVALID_RECEIPT_HANDLE
    assert "expired" in refused.value.message


def stored(properties: dict[str, str], body: bytes = b"payload", reconsume_times: int = 0) -> ReceivedMessage:
    topic = b"Orders"
    props = encode_properties(properties).encode()
    buf = bytearray(record_size(len(body), len(topic), len(props)))
    encode_record_into(
        buf, 0, 3, 0, 42, 4096, 0, 1_700_000_000_000, encode_host("10.0.0.7", 5555),
        1_700_000_000_100, encode_host("10.0.0.1", 10911), reconsume_times, 0, body, topic, props,
    )  # fmt: skip
    [message] = decode_pulled(bytes(buf), "broker-a")
    return message


def test_a_received_message_carries_its_properties_as_system_and_user_properties() -> None:
    message = stored(
        {
            "UNIQ_KEY": "7F000001ABCD",
            "TAGS": "TagA",
            "KEYS": "k1 k2",
            "__SHARDINGKEY": "group-1",
            "TRACE_CONTEXT": "trace",
            "POP_CK": "5 1700000000200 30000 0 0 broker-a 3 42",
            "color": "red",
        },
        reconsume_times=2,
    )
    converted = incoming_message(message)
    system = converted.system_properties
    assert converted.topic.name == "Orders"
    assert converted.body == b"payload"
    assert dict(converted.user_properties) == {"color": "red"}
    assert system.message_id == "7F000001ABCD"
    assert system.tag == "TagA"
    assert list(system.keys) == ["k1", "k2"]
    assert system.message_group == "group-1"
    assert system.message_type == v2.MessageType.FIFO
    assert system.trace_context == "trace"
    assert system.delivery_attempt == 3
    assert system.receipt_handle == "5 1700000000200 30000 0 0 broker-a 3 42 4096"
    assert system.queue_id == 3 and system.queue_offset == 42
    assert system.born_timestamp.ToMilliseconds() == 1_700_000_000_000
    assert system.store_timestamp.ToMilliseconds() == 1_700_000_000_100
    assert system.born_host.startswith("10.0.0.7")
    assert system.store_host == "10.0.0.1:10911"
    assert system.body_digest.type == v2.DigestType.MD5
    assert system.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()


@pytest.mark.parametrize(
    ("properties", "kind"),
    [
        ({}, v2.MessageType.NORMAL),
        ({"TRAN_MSG": "true"}, v2.MessageType.TRANSACTION),
        ({"TIMER_DELIVER_MS": "1700000005000"}, v2.MessageType.DELAY),
        ({"DELAY": "3"}, v2.MessageType.DELAY),
        ({"__SHARDINGKEY": "g"}, v2.MessageType.FIFO),
    ],
)
def test_the_message_type_follows_the_stored_properties(properties: dict[str, str], kind: int) -> None:
    assert incoming_message(stored(properties)).system_properties.message_type == kind


def test_a_message_without_uniq_key_is_named_by_its_offset_id_and_counted_from_its_reconsume_times() -> None:
    message = stored({"TIMER_DELIVER_MS": "1700000005000"}, reconsume_times=4)
    system = incoming_message(message).system_properties
    assert system.message_id == message.offset_msg_id
    assert system.delivery_attempt == 5
    assert system.delivery_timestamp.ToMilliseconds() == 1_700_000_005_000
    assert not system.HasField("receipt_handle")


def test_a_dead_letter_names_its_origin() -> None:
    message = stored({"DLQ_ORIGIN_TOPIC": "Orders", "DLQ_ORIGIN_MESSAGE_ID": "ABC"})
    dead_letter = incoming_message(message).system_properties.dead_letter_queue
    assert (dead_letter.topic, dead_letter.message_id) == ("Orders", "ABC")
