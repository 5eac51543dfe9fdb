"""The message trace record codec: bodies as RocketMQ's Java client writes them (built by hand from its
TraceDataEncoder's field order), round trips, and bytes that are not trace data."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.errors import ProtocolError
from cometmq.protocol.trace import (
    MessageType,
    TraceBean,
    TraceContext,
    TraceType,
    decode_trace_contexts,
    encode_trace_contexts,
    trace_keys,
)

A, B = "\x01", "\x02"
MSG_ID = "7F0000010C2D18B4AAC2470E5A5B0000"
OFFSET_ID = "7F00000100002A9F0000000000000A3C"

PUB = A.join(
    ["Pub", "1700000000000", "DefaultRegion", "PID_orders", "Orders", MSG_ID, "created", "order-1 order-2",
     "127.0.0.1:10911", "11", "3", "0", OFFSET_ID, "true"]
) + B  # fmt: skip
SUB_BEFORE = (
    A.join(["SubBefore", "1700000000100", "DefaultRegion", "GID_billing", "REQ1", MSG_ID, "2", "null"]) + B
)
SUB_AFTER = (
    A.join(["SubAfter", "REQ1", MSG_ID, "4", "false", "null", "4", "1700000000104", "GID_billing"]) + B
)
END_TRANSACTION = A.join(
    ["EndTransaction", "1700000000050", "DefaultRegion", "PID_orders", "Orders", MSG_ID, "null", "null",
     "127.0.0.1:10911", "2", "TX1", "COMMIT_MESSAGE", "true"]
) + B  # fmt: skip

PUB_CONTEXT = TraceContext(
    TraceType.Pub,
    1700000000000,
    "DefaultRegion",
    "PID_orders",
    cost_time=3,
    beans=[
        TraceBean(
            topic="Orders",
            msg_id=MSG_ID,
            offset_msg_id=OFFSET_ID,
            tags="created",
            keys="order-1 order-2",
            store_host="127.0.0.1:10911",
            body_length=11,
        )
    ],
)
SUB_BEFORE_CONTEXT = TraceContext(
    TraceType.SubBefore,
    1700000000100,
    "DefaultRegion",
    "GID_billing",
    request_id="REQ1",
    beans=[TraceBean(msg_id=MSG_ID, retry_times=2)],
)
SUB_AFTER_CONTEXT = TraceContext(
    TraceType.SubAfter,
    1700000000104,
    "",  # not in the record
    "GID_billing",
    cost_time=4,
    success=False,
    request_id="REQ1",
    context_code=4,
    beans=[TraceBean(msg_id=MSG_ID)],
)
END_TRANSACTION_CONTEXT = TraceContext(
    TraceType.EndTransaction,
    1700000000050,
    "DefaultRegion",
    "PID_orders",
    beans=[
        TraceBean(
            topic="Orders",
            msg_id=MSG_ID,
            store_host="127.0.0.1:10911",
            msg_type=MessageType.Trans_msg_Commit,
            transaction_id="TX1",
            transaction_state="COMMIT_MESSAGE",
            from_transaction_check=True,
        )
    ],
)
GOLDEN = [
    (PUB, PUB_CONTEXT),
    (SUB_BEFORE, SUB_BEFORE_CONTEXT),
    (SUB_AFTER, SUB_AFTER_CONTEXT),
    (END_TRANSACTION, END_TRANSACTION_CONTEXT),
]


@pytest.mark.parametrize(("record", "context"), GOLDEN, ids=[c.trace_type.value for _, c in GOLDEN])
def test_each_record_is_written_and_read_as_the_java_client_does(record: str, context: TraceContext) -> None:
    assert encode_trace_contexts([context]) == record.encode()
    assert decode_trace_contexts(record.encode()) == [context]


def test_a_trace_message_body_is_its_records_one_after_the_other() -> None:
    contexts = [context for _, context in GOLDEN]
    body = encode_trace_contexts(contexts)
    assert body == "".join(record for record, _ in GOLDEN).encode()
    assert decode_trace_contexts(body) == contexts


def test_a_consumed_batch_writes_one_record_per_message() -> None:
    beans = [TraceBean(msg_id=f"ID{i}", keys=f"key{i}") for i in range(3)]
    before = TraceContext(TraceType.SubBefore, 5, "DefaultRegion", "GID", request_id="R", beans=beans)
    decoded = decode_trace_contexts(encode_trace_contexts([before]))
    assert [ctx.beans[0].msg_id for ctx in decoded] == ["ID0", "ID1", "ID2"]
    assert {ctx.request_id for ctx in decoded} == {"R"}


def test_a_trace_message_is_found_by_each_message_id_and_key() -> None:
    assert trace_keys(PUB_CONTEXT) == {MSG_ID, "order-1", "order-2"}
    assert trace_keys(SUB_BEFORE_CONTEXT) == {MSG_ID}


def test_records_of_older_clients_are_read() -> None:
    # A Pub record before offsetMsgId was added; SubAfter records before the context code and before
    # the time and group were added.
    old_pub = A.join([*PUB.rstrip(B).split(A)[:12], "false"])
    old_after = A.join(SUB_AFTER.rstrip(B).split(A)[:6])
    coded_after = A.join(SUB_AFTER.rstrip(B).split(A)[:7])
    pub, after, coded = decode_trace_contexts(B.join([old_pub, old_after, coded_after]))
    assert pub.success is False and pub.beans[0].offset_msg_id == "" and pub.cost_time == 3
    assert (after.timestamp, after.group_name, after.context_code) == (0, "", 0)
    assert coded.context_code == 4 and coded.timestamp == 0


def test_a_rocketmq_5_pub_record_names_its_client_host() -> None:
    pub = decode_trace_contexts(PUB.rstrip(B) + A + "10.0.0.7" + B)[0]
    assert pub.beans[0].client_host == "10.0.0.7"


def test_records_of_unknown_types_are_skipped() -> None:
    assert decode_trace_contexts(f"Unknown{A}1{B}{PUB}{B}") == [PUB_CONTEXT]


@pytest.mark.parametrize(
    "record", ["Pub\x01notanumber", "SubBefore\x011", PUB.replace("\x013\x010\x01", "\x013\x019\x01")]
)
def test_a_short_or_malformed_record_is_a_protocol_error(record: str) -> None:
    with pytest.raises(ProtocolError):
        decode_trace_contexts(record)


_FIELD = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)
_NULLABLE = st.none() | _FIELD.filter(lambda text: text not in ("", "null"))
_NAME = st.text("ABCDEFabcdef0123456789_-", min_size=1, max_size=16)
_MS = st.integers(0, 2**62)
_COUNT = st.integers(-(2**31), 2**31 - 1)


@st.composite
def contexts(draw: st.DrawFn) -> TraceContext:
    kind = draw(st.sampled_from(TraceType))
    bean = TraceBean(
        msg_id=draw(_NAME),
        keys=draw(_NULLABLE),
    )
    ctx = TraceContext(kind, draw(_MS), draw(_FIELD), draw(_NAME), request_id=draw(_FIELD))
    if kind in (TraceType.Pub, TraceType.EndTransaction):
        bean.topic, bean.tags, bean.store_host = draw(_NAME), draw(_NULLABLE), draw(_FIELD)
        bean.msg_type = draw(st.sampled_from(MessageType))
        ctx.request_id = ""
    if kind is TraceType.Pub:
        bean.offset_msg_id, bean.body_length = draw(_FIELD), draw(_COUNT)
        ctx.cost_time, ctx.success = draw(_COUNT), draw(st.booleans())
    elif kind is TraceType.EndTransaction:
        bean.transaction_id, bean.transaction_state = draw(_NULLABLE), draw(_NAME)
        bean.from_transaction_check = draw(st.booleans())
    elif kind is TraceType.SubBefore:
        bean.retry_times = draw(_COUNT)
    else:
        ctx.region_id = ""
        ctx.cost_time, ctx.success, ctx.context_code = draw(_COUNT), draw(st.booleans()), draw(_COUNT)
    ctx.beans.append(bean)
    return ctx


@given(st.lists(contexts(), max_size=5))
def test_records_round_trip(records: list[TraceContext]) -> None:
    assert decode_trace_contexts(encode_trace_contexts(records)) == records


@given(
    st.binary(max_size=300)
    | st.text(st.sampled_from("\x01\x02Pub SubBefore SubAfter 0123 true"), max_size=200)
)
def test_any_body_decodes_or_raises_protocol_error(body: bytes | str) -> None:
    with contextlib.suppress(ProtocolError):
        decode_trace_contexts(body)
