"""POP consumption's wire pieces: the receipt handle, the pop headers and the batch-ack body."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.errors import HeaderError
from cometmq.protocol.jsonbody import BodyError
from cometmq.protocol.pop import (
    MAX_BITSET_BYTES,
    AckMessageRequestHeader,
    BatchAck,
    ExtraInfo,
    PopMessageRequestHeader,
    RetryMark,
    decode_batch_ack_body,
    encode_batch_ack_body,
    pop_retry_topic,
)

longs = st.integers(min_value=0, max_value=2**62)


@given(
    longs,
    longs,
    longs,
    st.integers(0, 999),
    st.sampled_from(RetryMark),
    st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True),
    st.integers(0, 1023),
    longs,
    st.none() | longs,
)
def test_a_receipt_handle_round_trips_through_its_text_with_or_without_a_commit_log_offset(
    ck: int,
    pop: int,
    invisible: int,
    revive: int,
    retry: RetryMark,
    broker: str,
    queue: int,
    offset: int,
    commitlog_offset: int | None,
) -> None:
    info = ExtraInfo(ck, pop, invisible, revive, retry, broker, queue, offset, commitlog_offset)
    text = str(info)
    assert len(text.split(" ")) == (8 if commitlog_offset is None else 9)
    assert ExtraInfo.parse(text) == info


def test_a_receipt_handle_is_rocketmqs_space_separated_extra_info() -> None:
    info = ExtraInfo.parse("5 1700000000000 30000 0 1 broker-a 3 7")
    assert (info.ck_queue_offset, info.pop_time, info.invisible_time) == (5, 1700000000000, 30000)
    assert info.revive_qid == 0
    assert info.retry is RetryMark.RETRY_V1 and info.broker_name == "broker-a"
    assert (info.queue_id, info.queue_offset) == (3, 7)
    assert info.visible_at == 1700000030000 and not info.is_order
    assert info.real_topic("orders", "g") == "%RETRY%g_orders" == pop_retry_topic("orders", "g")
    assert ExtraInfo.parse("5 1 2 999 0 b 0 5").is_order


def test_rocketmq_proxys_handle_carries_the_commit_log_offset_as_a_ninth_field() -> None:
    info = ExtraInfo.parse("5 1700000000000 30000 0 0 broker-a 3 7 4096")
    assert (info.broker_name, info.queue_id, info.queue_offset) == ("broker-a", 3, 7)
    assert info.commitlog_offset == 4096
    assert ExtraInfo.parse("5 1700000000000 30000 0 0 broker-a 3 7").commitlog_offset is None


def test_trailing_separators_are_dropped_as_javas_split_drops_them() -> None:
    assert ExtraInfo.parse("5 1 2 0 0 b 0 7  ") == ExtraInfo.parse("5 1 2 0 0 b 0 7")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1 2 3",
        "a 1 2 3 0 b 0 5",
        "1 2 3 4 9 b 0 5",
        "1 2 3 4 0  0 5",
        "1 2 3 4 0 b 0 5 x",
        "1 2 3 4 0 b 0 5 6 7",
        " 1 2 3 4 0 b 0 5",
    ],
)
def test_a_malformed_receipt_handle_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        ExtraInfo.parse(text)


@given(st.text(max_size=80))
def test_any_text_parses_or_raises_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        ExtraInfo.parse(text)


def test_the_pop_header_reads_rocketmqs_fields() -> None:
    fields = {
        "consumerGroup": "g",
        "topic": "t",
        "queueId": "-1",
        "maxMsgNums": "32",
        "invisibleTime": "60000",
        "pollTime": "15000",
        "bornTime": "1700000000000",
        "initMode": "0",
        "expType": "TAG",
        "exp": "a || b",
        "order": "true",
    }
    pop = PopMessageRequestHeader.decode(fields)
    assert (pop.queue_id, pop.max_msg_nums, pop.invisible_time, pop.poll_time) == (-1, 32, 60000, 15000)
    assert pop.order and pop.exp == "a || b" and pop.attempt_id is None
    assert PopMessageRequestHeader.decode(pop.encode()) == pop


def test_an_ack_header_without_its_receipt_handle_is_refused() -> None:
    with pytest.raises(HeaderError) as raised:
        AckMessageRequestHeader.decode({"consumerGroup": "g", "topic": "t", "queueId": "0", "offset": "1"})
    assert "extraInfo is missing" in raised.value.remark


def test_a_batch_ack_body_round_trips_with_rocketmqs_bitset() -> None:
    ack = BatchAck("g", "t", RetryMark.TOPIC, 10, 2, 0, 1700000000000, 30000, (0, 3, 9))
    broker, acks = decode_batch_ack_body(encode_batch_ack_body("broker-a", [ack]))
    assert broker == "broker-a" and acks == [ack]
    # Java's BitSet.toByteArray of {0, 3, 9}: bytes 0x09 0x02, base64 "CQI=".
    assert b'"b":"CQI="' in encode_batch_ack_body(None, [ack])


def test_a_batch_ack_body_accepts_the_long_field_names() -> None:
    body = (
        b'{"acks":[{"consumerGroup":"g","topic":"t","retry":"1","startOffset":4,"queueId":0,'
        b'"reviveQueueId":0,"popTime":1,"invisibleTime":2,"bitSet":"AQ=="}]}'
    )
    _, acks = decode_batch_ack_body(body)
    assert acks[0].retry is RetryMark.RETRY_V1 and acks[0].offsets_from_start == (0,)


@pytest.mark.parametrize(
    "body",
    [b"[]", b"{", b'{"acks":[{"c":"g","t":"t","so":0,"q":0,"pt":1,"it":1,"b":"!!"}]}', b'{"acks":[1]}'],
)
def test_a_bad_batch_ack_body_is_refused(body: bytes) -> None:
    with pytest.raises(BodyError):
        decode_batch_ack_body(body)


@given(st.frozensets(st.integers(min_value=0, max_value=MAX_BITSET_BYTES * 8 - 1), max_size=64))
def test_a_batch_ack_bitset_names_exactly_its_set_bits(indexes: frozenset[int]) -> None:
    ack = BatchAck("g", "t", RetryMark.TOPIC, 0, 0, 0, 1, 1, tuple(sorted(indexes)))
    _, (decoded,) = decode_batch_ack_body(encode_batch_ack_body(None, [ack]))
    assert decoded == ack
