"""The Spark connector's pure parts, without a SparkSession or a server: option parsing, the offsets
JSON Spark checkpoints, how a read limit is shared between queues, the pull-body decoder (checked
against the client's reference decoder), and the sink's message ids, column check and batching."""

from __future__ import annotations

import datetime
import itertools
import json
import re
import string
import struct
import sys
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cometmq.client import PullResult, PullStatus
from cometmq.client.message import Message, MessageQueue, ReceivedMessage, decode_pulled
from cometmq.errors import OptionError, RecordError
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOST_V6_FLAG,
    encode_host,
    encode_record_into,
    record_size,
)
from cometmq.protocol.subscription import SubscriptionData
from cometmq.spark import _offsets
from cometmq.spark._columns import _BODY_LENGTH_AT, SYSTEM_PROPERTIES, DecodedBatch, _split, decode_batch
from cometmq.spark._options import DEFAULT_MAX_TRIGGER_DELAY_MS, ReadOptions, WriteOptions
from cometmq.spark._read import _lost_from
from cometmq.spark._schema import ARROW_SCHEMA
from cometmq.spark._source import _share
from cometmq.spark._write import (
    BATCH_MAX_BYTES,
    BATCH_MAX_MESSAGES,
    WriteTarget,
    _by_queue,
    _chunks,
    _messages,
    check_columns,
    message_id,
    queue_of,
)

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
NAME_CHARS = string.ascii_letters + string.digits + "_-"
names = st.text(NAME_CHARS, min_size=1, max_size=20)
queues = st.builds(MessageQueue, names, names, st.integers(0, 1000))

# The decoder tests run Arrow kernels whose first calls are slow: no per-example deadline.
decoder_settings = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Cheap properties: fewer examples than hypothesis's default 100 keep the file quick.
quick = settings(max_examples=50, deadline=None)


def _utc(millis: int) -> datetime.datetime:
    return EPOCH + datetime.timedelta(milliseconds=millis)


# --- ReadOptions.parse ------------------------------------------------------------------------------


def _read(**options: str) -> ReadOptions:
    return ReadOptions.parse(options)


def test_topic_is_a_comma_separated_list_with_blanks_dropped() -> None:
    opts = _read(topic=" orders, payments ,, audit ")
    assert opts.topics == ("orders", "payments", "audit")
    assert opts.topic_pattern is None


def test_topic_pattern_is_compiled_and_leaves_the_topic_list_empty() -> None:
    opts = _read(topicPattern="orders-.*")
    assert opts.topics == ()
    assert opts.topic_pattern is not None
    assert opts.topic_pattern.fullmatch("orders-eu")
    assert not opts.topic_pattern.fullmatch("payments")


@pytest.mark.parametrize(
    "options",
    [{}, {"topic": "   "}, {"topicPattern": " "}, {"topic": "a", "topicPattern": "a.*"}],
    ids=["neither", "blank-topic", "blank-pattern", "both"],
)
def test_exactly_one_of_topic_and_topic_pattern_is_required(options: dict[str, str]) -> None:
    with pytest.raises(OptionError, match="exactly one of"):
        ReadOptions.parse(options)


def test_a_topic_pattern_that_is_not_a_regular_expression_is_refused() -> None:
    with pytest.raises(OptionError, match="not a regular expression"):
        _read(topicPattern="orders-(")


def test_a_topic_list_naming_no_topic_is_refused() -> None:
    with pytest.raises(OptionError):
        _read(topic=" , ,")


@pytest.mark.parametrize(
    ("expression", "tags"),
    [
        (None, frozenset()),
        ("*", frozenset()),
        ("  ", frozenset()),
        ("TagA", frozenset({"TagA"})),
        ("TagA || TagB ||", frozenset({"TagA", "TagB"})),
    ],
)
def test_sub_expression_gives_the_tags_to_keep(expression: str | None, tags: frozenset[str]) -> None:
    options = {"topic": "t"} | ({} if expression is None else {"subExpression": expression})
    opts = ReadOptions.parse(options)
    assert SubscriptionData.from_expression("t", opts.sub_expression).tags == tags  # what a read keeps
    assert opts.sub_expression == (expression.strip() if expression and expression.strip() else "*")


def test_offsets_per_trigger_are_parsed_as_whole_numbers() -> None:
    opts = _read(topic="t", maxOffsetsPerTrigger=" 1000 ", minOffsetsPerTrigger="1000")
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger) == (1000, 1000)
    unset = _read(topic="t")
    assert (unset.max_offsets_per_trigger, unset.min_offsets_per_trigger) == (None, None)


@pytest.mark.parametrize("name", ["maxOffsetsPerTrigger", "minOffsetsPerTrigger"])
@pytest.mark.parametrize("value", ["0", "-5", "abc", "1.5", "1e3"])
def test_offsets_per_trigger_must_be_positive_whole_numbers(name: str, value: str) -> None:
    with pytest.raises(OptionError, match=name):
        ReadOptions.parse({"topic": "t", name: value})


def test_min_offsets_per_trigger_above_the_max_is_refused() -> None:
    with pytest.raises(OptionError, match=r"minOffsetsPerTrigger \(11\) is larger"):
        _read(topic="t", maxOffsetsPerTrigger="10", minOffsetsPerTrigger="11")


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("15m", 900_000),
        ("1h", 3_600_000),
        ("250", 250),
        ("0", 0),
        (" 2 days ", 172_800_000),
        ("10 seconds", 10_000),
        ("3 minutes", 180_000),
        ("1H", 3_600_000),
        ("20 milliseconds", 20),
    ],
)
def test_max_trigger_delay_is_a_duration_in_ms(text: str, millis: int) -> None:
    assert _read(topic="t", maxTriggerDelay=text).max_trigger_delay_ms == millis


def test_max_trigger_delay_defaults_to_15_minutes() -> None:
    assert _read(topic="t").max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS == 900_000


@pytest.mark.parametrize("text", ["", "soon", "1.5s", "-1s", "5 weeks", "m", "10 ms s"])
def test_a_max_trigger_delay_that_is_no_duration_is_refused(text: str) -> None:
    with pytest.raises(OptionError, match="maxTriggerDelay"):
        _read(topic="t", maxTriggerDelay=text)


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("1700000000000", 1_700_000_000_000),
        (" 0 ", 0),
        ("2024-01-02T03:04:05.678", 1_704_164_645_678),  # naive: UTC
        ("2024-01-02T05:04:05.678+02:00", 1_704_164_645_678),
        ("2024-01-02T03:04:05.678Z", 1_704_164_645_678),
        ("2024-01-02", 1_704_153_600_000),
    ],
)
def test_starting_timestamp_is_ms_or_iso_8601(text: str, millis: int) -> None:
    assert _read(topic="t", startingTimestamp=text).starting_timestamp == millis


@quick
@given(st.integers(1_577_836_800_000, 1_893_456_000_000))  # 2020 to 2030
def test_a_naive_iso_starting_timestamp_is_read_as_utc(millis: int) -> None:
    text = _utc(millis).replace(tzinfo=None).isoformat(timespec="milliseconds")
    assert _read(topic="t", startingTimestamp=text).starting_timestamp == millis


def test_an_iso_starting_timestamp_keeps_every_millisecond() -> None:
    # 1970-01-25T13:36:33.641Z is 2122593641 ms; timestamp() * 1000 gives 2122593640.9999998.
    assert _read(topic="t", startingTimestamp="1970-01-25T13:36:33.641").starting_timestamp == 2_122_593_641


def test_starting_timestamp_is_none_when_not_given() -> None:
    assert _read(topic="t").starting_timestamp is None


@pytest.mark.parametrize("text", ["yesterday", "2024-13-01", "12:00 on Monday"])
def test_a_starting_timestamp_that_is_neither_ms_nor_iso_is_refused(text: str) -> None:
    with pytest.raises(OptionError, match="startingTimestamp"):
        _read(topic="t", startingTimestamp=text)


def test_booleans_default_and_parse_case_insensitively() -> None:
    defaults = _read(topic="t")
    assert (defaults.fail_on_data_loss, defaults.include_properties) == (True, False)
    given_ = _read(topic="t", failOnDataLoss=" FALSE ", includeProperties="True")
    assert (given_.fail_on_data_loss, given_.include_properties) == (False, True)


@pytest.mark.parametrize("name", ["failOnDataLoss", "includeProperties"])
@pytest.mark.parametrize("value", ["yes", "1", "", "truthy"])
def test_a_boolean_that_is_not_true_or_false_is_refused(name: str, value: str) -> None:
    with pytest.raises(OptionError, match=f"{name} must be true or false"):
        ReadOptions.parse({"topic": "t", name: value})


@pytest.mark.parametrize(
    ("value", "spec"),
    [
        ("earliest", "earliest"),
        (" LATEST ", "latest"),
        ('{"t": {"broker-a": {"0": 5}}}', '{"t": {"broker-a": {"0": 5}}}'),
        ("  ", None),
    ],
)
def test_starting_and_ending_offsets_are_earliest_latest_or_json(value: str, spec: str | None) -> None:
    assert _read(topic="t", startingOffsets=value).starting_offsets == spec
    if spec != "earliest":  # an end at the earliest offsets is refused (test_read_options.py)
        assert _read(topic="t", endingOffsets=value).ending_offsets == spec


def test_offsets_default_to_none_for_the_start_and_the_end() -> None:
    opts = _read(topic="t")
    assert (opts.starting_offsets, opts.ending_offsets) == (None, None)


@pytest.mark.parametrize("name", ["startingOffsets", "endingOffsets"])
@pytest.mark.parametrize("value", ["garbage", "0", "[1, 2]", "earliest-ish"])
def test_an_offsets_spec_that_is_not_earliest_latest_or_json_is_refused(name: str, value: str) -> None:
    with pytest.raises(OptionError, match=f"{name} must be 'earliest', 'latest' or JSON"):
        ReadOptions.parse({"topic": "t", name: value})


def test_option_names_are_case_insensitive() -> None:
    mixed = ReadOptions.parse(
        {
            "TOPIC": "orders",
            "MaxOffsetsPerTrigger": "7",
            "INCLUDEPROPERTIES": "true",
            "StartingOffsets": "earliest",
            "NameSrv": "10.0.0.1:9876",
        }
    )
    lowered = ReadOptions.parse(
        {
            "topic": "orders",
            "maxoffsetspertrigger": "7",
            "includeproperties": "true",
            "startingoffsets": "earliest",
            "namesrv": "10.0.0.1:9876",
        }
    )
    assert mixed == lowered
    assert (mixed.topics, mixed.max_offsets_per_trigger, mixed.namesrv) == (("orders",), 7, "10.0.0.1:9876")
    assert mixed.include_properties
    assert mixed.starting_offsets == "earliest"


def test_namesrv_defaults_to_the_local_name_server() -> None:
    assert _read(topic="t").namesrv == "127.0.0.1:9876"
    assert _read(topic="t", namesrv=" ").namesrv == "127.0.0.1:9876"


# --- offsets JSON -----------------------------------------------------------------------------------

queue_offsets = st.dictionaries(queues, st.integers(-2, 2**63 - 1), max_size=20)


@quick
@given(queue_offsets)
def test_offsets_round_trip_through_the_nested_dict(offsets: dict[MessageQueue, int]) -> None:
    assert _offsets.from_json(_offsets.to_json(offsets)) == offsets


@quick
@given(queue_offsets)
def test_offsets_round_trip_through_json_text(offsets: dict[MessageQueue, int]) -> None:
    text = json.dumps(_offsets.to_json(offsets))  # queue ids become strings, as in Spark's checkpoint
    assert _offsets.from_json(text) == offsets
    assert _offsets.from_json(json.loads(text)) == offsets


@quick
@given(queue_offsets, st.randoms(use_true_random=False))
def test_equal_offsets_give_equal_json_whatever_their_order(
    offsets: dict[MessageQueue, int], rnd: Any
) -> None:
    items = list(offsets.items())
    rnd.shuffle(items)
    assert json.dumps(_offsets.to_json(dict(items))) == json.dumps(_offsets.to_json(offsets))


def test_offsets_json_nests_topic_broker_and_queue_id() -> None:
    offsets = {MessageQueue("orders", "broker-a", 1): 118, MessageQueue("orders", "broker-a", 0): 120}
    assert _offsets.to_json(offsets) == {"orders": {"broker-a": {"0": 120, "1": 118}}}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1, 2], "must look like"),
        ("[1, 2]", "must look like"),
        ("42", "must look like"),
        (None, "must look like"),
        ("{not json", "not valid JSON"),
        ({"t": [1]}, "topic 't' must map broker names"),
        ({"t": {"b": 5}}, "t@b must map queue ids"),
        ({"t": {"b": {"x": 1}}}, "queue id 'x' of t@b is not a number"),
        ({"t": {"b": {"0": "5"}}}, "offset of t@b:0 must be a whole number >= -2, not '5'"),
        ({"t": {"b": {"0": 1.5}}}, "not 1.5"),
        ({"t": {"b": {"0": True}}}, "not True"),
        ({"t": {"b": {"0": None}}}, "not None"),
        ({"t": {"b": {"0": -3}}}, "not -3"),
    ],
)
def test_malformed_offsets_raise_a_clear_option_error(value: Any, message: str) -> None:
    with pytest.raises(OptionError, match=re.escape(message)) as caught:
        _offsets.from_json(value, "startingOffsets")
    assert str(caught.value).startswith("startingOffsets")


# --- sharing a read limit between queues ------------------------------------------------------------

availability = st.dictionaries(queues, st.integers(0, 10_000), min_size=1, max_size=12)


@quick
@given(availability, st.integers(0, 150_000))
def test_shares_add_up_to_the_budget_and_fit_what_is_available(
    available: dict[MessageQueue, int], budget: int
) -> None:
    shares = _share(available, budget)
    assert shares.keys() == available.keys()
    assert sum(shares.values()) == min(budget, sum(available.values()))
    assert all(0 <= shares[q] <= available[q] for q in available)


@quick
@given(availability, st.integers(0, 1000))
def test_a_budget_covering_everything_gives_everything(
    available: dict[MessageQueue, int], extra: int
) -> None:
    assert _share(available, sum(available.values()) + extra) == available


@quick
@given(availability, st.integers(0, 150_000))
def test_shares_are_proportional_to_what_each_queue_has(
    available: dict[MessageQueue, int], budget: int
) -> None:
    total = sum(available.values())
    shares = _share(available, budget)
    if budget < total:
        # |share - n * budget / total| < 1, in integers
        assert all(abs(shares[q] * total - n * budget) < total for q, n in available.items())


@quick
@given(availability, st.integers(0, 150_000), st.randoms(use_true_random=False))
def test_shares_do_not_depend_on_the_order_of_the_queues(
    available: dict[MessageQueue, int], budget: int, rnd: Any
) -> None:
    shares = _share(available, budget)
    assert _share(dict(reversed(available.items())), budget) == shares
    shuffled = list(available.items())
    rnd.shuffle(shuffled)
    assert _share(dict(shuffled), budget) == shares


# --- decode_batch against the reference decoder -----------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    """One message to store: what a producer set, and what the broker stamped on it."""

    body: bytes
    user: dict[str, str]
    tags: str | None
    keys: tuple[str, ...] | None
    uniq: str | None
    born: int
    store: int
    reconsume: int
    flag: int
    order: tuple[int, ...]  # the order of the properties in the stored text

    def properties(self) -> bytes:
        props = dict(self.user)
        if self.tags is not None:
            props["TAGS"] = self.tags
        if self.keys is not None:
            props["KEYS"] = " ".join(self.keys)
        if self.uniq is not None:
            props["UNIQ_KEY"] = self.uniq
        items = list(props.items())
        return encode_properties(dict(items[i] for i in self.order if i < len(items))).encode()


COMPRESS_OVER = 4096  # the producer's compressMsgBodyOverHowmuch
PROPERTY_NAMES = st.text(NAME_CHARS + ".", min_size=1, max_size=12).filter(
    lambda n: n not in SYSTEM_PROPERTIES
)
PROPERTY_VALUES = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=20
)
TAG_NAMES = st.text(NAME_CHARS, min_size=1, max_size=10)
KEY_NAMES = st.text(NAME_CHARS + ":#", min_size=1, max_size=12)
bodies = st.one_of(
    st.just(b""),
    st.binary(max_size=64),
    # over 4 KiB, so stored compressed
    st.tuples(st.binary(min_size=1, max_size=16), st.binary(max_size=64)).map(
        lambda p: p[0] * (COMPRESS_OVER // len(p[0]) + 1) + p[1]
    ),
)


@st.composite
def specs(draw: st.DrawFn, *, system_always: bool = False, tags: st.SearchStrategy[str] = TAG_NAMES) -> _Spec:
    def maybe(strategy: st.SearchStrategy[Any]) -> Any:
        return draw(strategy if system_always else st.none() | strategy)

    user = draw(st.dictionaries(PROPERTY_NAMES, PROPERTY_VALUES, max_size=4))
    return _Spec(
        body=draw(bodies),
        user=user,
        tags=maybe(tags),
        keys=maybe(st.lists(KEY_NAMES, min_size=1, max_size=3).map(tuple)),
        uniq=maybe(st.text("0123456789ABCDEF", min_size=32, max_size=32)),
        born=draw(st.integers(0, 253_402_300_799_999)),  # up to 9999-12-31
        store=draw(st.integers(0, 253_402_300_799_999)),
        reconsume=draw(st.integers(0, 2**31 - 1)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        order=tuple(draw(st.permutations(range(len(user) + 3)))),
    )


@dataclass(frozen=True)
class _Queue:
    topic: str
    broker: str
    queue_id: int
    store_host: bytes
    commitlog_start: int


pull_queues = st.builds(
    _Queue,
    names,
    names,
    st.integers(0, 1000),
    st.builds(encode_host, st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
    st.integers(0, 2**50),
)


def _stored(spec: _Spec) -> tuple[bytes, int]:
    if len(spec.body) > COMPRESS_OVER:
        return zlib.compress(spec.body), 0x1
    return spec.body, 0


def _records(messages: list[_Spec], offsets: list[int], queue: _Queue) -> list[bytes]:
    """The records as a pull body carries them, written by the store's encoder, one by one."""
    topic = queue.topic.encode()
    out: list[bytes] = []
    commitlog_offset = queue.commitlog_start
    for spec, offset in zip(messages, offsets, strict=True):
        body, sys_flag = _stored(spec)
        props = spec.properties()
        buf = bytearray(record_size(len(body), len(topic), len(props)))
        encode_record_into(
            buf,
            0,
            queue.queue_id,
            spec.flag,
            offset,
            commitlog_offset,
            sys_flag,
            spec.born,
            encode_host("192.168.0.7", 40001),
            spec.store,
            queue.store_host,
            spec.reconsume,
            0,
            body,
            topic,
            props,
        )
        out.append(bytes(buf))
        commitlog_offset += len(buf)
    return out


def _encode(messages: list[_Spec], offsets: list[int], queue: _Queue) -> bytes:
    return b"".join(_records(messages, offsets, queue))


def _general_record(
    spec: _Spec, offset: int, queue: _Queue, commitlog_offset: int, *, ipv6: bool, magic: int
) -> bytes:
    """A record only the general decoder reads: IPv6 hosts and/or RocketMQ 5.x's magic code (built
    field by field from the layout in protocol/record.py, as encode_record_into writes IPv4 v1 only)."""
    body, sys_flag = _stored(spec)
    born_host = encode_host("2001:db8::7", 40001) if ipv6 else encode_host("192.168.0.7", 40001)
    store_host = encode_host("2001:db8::1", 10911) if ipv6 else queue.store_host
    if ipv6:
        sys_flag |= BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
    topic, props = queue.topic.encode(), spec.properties()
    head = (
        struct.pack(
            ">iiiqqiq",
            zlib.crc32(body) & 0x7FFFFFFF,
            queue.queue_id,
            spec.flag,
            offset,
            commitlog_offset,
            sys_flag,
            spec.born,
        )
        + born_host
        + struct.pack(">q", spec.store)
        + store_host
        + struct.pack(">iqi", spec.reconsume, 0, len(body))
    )
    topic_length = struct.pack(">h" if magic == MESSAGE_MAGIC_CODE_V2 else ">b", len(topic))
    tail = body + topic_length + topic + struct.pack(">h", len(props)) + props
    return struct.pack(">iI", 8 + len(head) + len(tail), magic) + head + tail


BLANK_FILLER = struct.pack(">iI", 24, BLANK_MAGIC_CODE) + bytes(16)


def _reference_row(m: ReceivedMessage, include_properties: bool) -> dict[str, Any]:
    props = m.properties
    return {
        "topic": m.topic,
        "broker": m.broker_name,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "msg_id": m.msg_id,
        "keys": m.keys if "KEYS" in props else None,
        "tags": m.tags,
        "body": m.body,
        "properties": {k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES}
        if include_properties
        else None,
        "born_timestamp": _utc(m.born_timestamp),
        "store_timestamp": _utc(m.store_timestamp),
        "reconsume_times": m.reconsume_times,
    }


def _rows(decoded: DecodedBatch) -> list[dict[str, Any]]:
    rows = decoded.batch.to_pylist()
    for row in rows:
        if row["properties"] is not None:
            pairs = row["properties"]
            row["properties"] = dict(pairs)
            assert len(row["properties"]) == len(pairs), "a property name appears twice in the map"
    return rows


def _decode_like_the_reference(
    data: bytes, queue: _Queue, include_properties: bool, end: int = 2**62
) -> tuple[DecodedBatch, list[ReceivedMessage]]:
    decoded = decode_batch(
        data, queue.topic, queue.broker, queue.queue_id, end=end, include_properties=include_properties
    )
    assert decoded is not None
    assert decoded.batch.schema.equals(ARROW_SCHEMA, check_metadata=True)
    reference = decode_pulled(data, queue.broker)
    assert _rows(decoded) == [
        _reference_row(m, include_properties) for m in reference if m.queue_offset < end
    ]
    return decoded, reference


@decoder_settings
@given(
    st.lists(specs(system_always=True), min_size=1, max_size=12),
    pull_queues,
    st.integers(0, 2**40),
    st.booleans(),
)
def test_decoded_columns_match_the_reference_decoder(
    messages: list[_Spec], queue: _Queue, start: int, include_properties: bool
) -> None:
    offsets = list(range(start, start + len(messages)))
    decoded, _ = _decode_like_the_reference(_encode(messages, offsets, queue), queue, include_properties)
    assert decoded.offsets == tuple(offsets)
    rows = decoded.batch.to_pylist()
    assert [row["body"] for row in rows] == [m.body for m in messages]
    assert [row["born_timestamp"] for row in rows] == [_utc(m.born) for m in messages]
    if include_properties:
        assert [dict(row["properties"]) for row in rows] == [m.user for m in messages]
    else:
        assert all(row["properties"] is None for row in rows)


@settings(decoder_settings)
@given(st.lists(specs(), min_size=1, max_size=12), pull_queues, st.integers(0, 2**40), st.booleans())
def test_decoded_columns_match_the_reference_decoder_with_system_properties_absent(
    messages: list[_Spec], queue: _Queue, start: int, include_properties: bool
) -> None:
    offsets = list(range(start, start + len(messages)))
    _decode_like_the_reference(_encode(messages, offsets, queue), queue, include_properties)


def test_a_compressed_body_that_does_not_inflate_is_read_as_stored_as_the_consumer_hands_it_over(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "_stored", lambda spec: (spec.body, 0x1))
    spec = _Spec(b"not zlib data", {"colour": "red"}, None, None, None, 1, 2, 0, 0, (0, 1, 2, 3))
    queue = _Queue("t", "broker-a", 3, encode_host("10.0.0.1", 10911), 4096)
    decoded, _ = _decode_like_the_reference(_encode([spec, spec], [7, 8], queue), queue, False)
    assert [row["body"] for row in decoded.batch.to_pylist()] == [b"not zlib data"] * 2
    assert (
        sum("t@broker-a:3" in r.getMessage() and "read as stored" in r.getMessage() for r in caplog.records)
        == 2
    )


def test_absent_tags_keys_and_uniq_key_read_as_null_and_the_offset_msg_id() -> None:
    spec = _Spec(b"x", {"colour": "red"}, None, None, None, 1, 2, 0, 0, (0, 1, 2, 3))
    queue = _Queue("t", "broker-a", 3, encode_host("10.0.0.1", 10911), 4096)
    data = _encode([spec], [7], queue) + _general_record(
        spec, 8, queue, 5000, ipv6=True, magic=MESSAGE_MAGIC_CODE
    )
    decoded = decode_batch(data, "t", "broker-a", 3, end=100)
    assert decoded is not None
    rows = decoded.batch.to_pylist()
    assert [(r["tags"], r["keys"]) for r in rows] == [(None, None), (None, None)]
    assert [r["msg_id"] for r in rows] == [
        "0A00000100002A9F0000000000001000",
        encode_host("2001:db8::1", 10911).hex().upper() + "0000000000001388",
    ]


@pytest.mark.parametrize(
    ("keys", "column"),
    [("k1 k2", ["k1", "k2"]), ("  k1   k2 ", ["k1", "k2"]), ("k1", ["k1"]), ("   ", []), ("", [])],
)
def test_keys_split_at_runs_of_spaces_like_the_reference(keys: str, column: list[str] | None) -> None:
    queue = _Queue("t", "broker-a", 0, encode_host("10.0.0.1", 10911), 0)
    spec = _Spec(b"x", {}, None, None, None, 1, 2, 0, 0, (0,))
    props = f"KEYS\x01{keys}".encode()
    buf = bytearray(record_size(1, 1, len(props)))
    encode_record_into(
        buf, 0, 0, 0, 0, 0, 0, 1, queue.store_host, 2, queue.store_host, 0, 0, b"x", b"t", props
    )
    plain = _encode([spec], [1], queue)  # a row without keys in the same batch
    decoded, _ = _decode_like_the_reference(bytes(buf) + plain, queue, include_properties=False)
    assert decoded.batch.column("keys").to_pylist() == [column, None]


def test_a_repeated_property_name_reads_as_its_last_value_as_in_the_reference() -> None:
    queue = _Queue("t", "broker-a", 0, encode_host("10.0.0.1", 10911), 0)
    props = (
        b"TAGS\x01first\x02UNIQ_KEY\x01AAAA\x02KEYS\x01k1\x02TAGS\x01last\x02UNIQ_KEY\x01BBBB\x02KEYS\x01k2"
    )
    buf = bytearray(record_size(1, 1, len(props)))
    encode_record_into(
        buf, 0, 0, 0, 0, 0, 0, 1, queue.store_host, 2, queue.store_host, 0, 0, b"x", b"t", props
    )
    _decode_like_the_reference(bytes(buf), queue, include_properties=True)


@decoder_settings
@given(st.lists(specs(), min_size=1, max_size=12), pull_queues, st.integers(0, 2**40))
def test_plain_records_are_split_by_arrow_and_others_are_not(
    messages: list[_Spec], queue: _Queue, start: int
) -> None:
    """The column path (what makes reads fast) takes every plain 4.x IPv4 body; a record only the
    general decoder reads, or a foreign topic length, sends the body there."""
    offsets = list(range(start, start + len(messages)))
    records = _records(messages, offsets, queue)
    topic_length = len(queue.topic.encode())
    fields = _split(b"".join(records), topic_length)
    assert fields is not None
    assert fields.queue_offsets.to_pylist() == offsets
    assert fields.bodies.to_pylist() == [_stored(m)[0] for m in messages]
    assert _split(b"".join(records), topic_length + 1) is None
    last = _general_record(messages[-1], offsets[-1], queue, 0, ipv6=True, magic=MESSAGE_MAGIC_CODE)
    assert _split(b"".join([*records[:-1], last]), topic_length) is None


@decoder_settings
@given(
    st.lists(specs(system_always=True), min_size=3, max_size=9),
    pull_queues,
    st.integers(0, 2**40),
    st.sampled_from(
        [(True, MESSAGE_MAGIC_CODE), (False, MESSAGE_MAGIC_CODE_V2), (True, MESSAGE_MAGIC_CODE_V2)]
    ),
    st.data(),
)
def test_records_for_the_general_decoder_mixed_in_decode_the_same(
    messages: list[_Spec], queue: _Queue, start: int, kind: tuple[bool, int], data: st.DataObject
) -> None:
    """IPv6 hosts, 5.x records and blank fillers leave the fast path; the result is the same."""
    ipv6, magic = kind
    offsets = list(range(start, start + len(messages)))
    at = data.draw(st.integers(0, len(messages) - 1), label="general record at")
    blank_at = data.draw(st.integers(0, len(messages)), label="blank filler before record")
    records = _records(messages, offsets, queue)
    commitlog_offset = queue.commitlog_start + sum(map(len, records[:at]))
    records[at] = _general_record(messages[at], offsets[at], queue, commitlog_offset, ipv6=ipv6, magic=magic)
    records.insert(blank_at, BLANK_FILLER)
    decoded, reference = _decode_like_the_reference(b"".join(records), queue, include_properties=True)
    assert len(reference) == len(messages)
    assert decoded.offsets == tuple(offsets)


@decoder_settings
@given(st.lists(specs(), min_size=1, max_size=12), pull_queues, st.integers(0, 2**40), st.data())
def test_rows_at_or_after_the_end_are_cut_but_every_offset_is_reported(
    messages: list[_Spec], queue: _Queue, start: int, data: st.DataObject
) -> None:
    offsets = list(range(start, start + len(messages)))
    end = data.draw(st.integers(start - 1, start + len(messages) + 1), label="end")
    decoded = decode_batch(
        _encode(messages, offsets, queue), queue.topic, queue.broker, queue.queue_id, end=end
    )
    assert decoded is not None
    assert decoded.batch.column("queue_offset").to_pylist() == [o for o in offsets if o < end]
    assert decoded.batch.column("body").to_pylist() == [
        m.body for m, o in zip(messages, offsets, strict=True) if o < end
    ]
    assert decoded.offsets == tuple(offsets)
    assert (decoded.first, decoded.last, decoded.count) == (offsets[0], offsets[-1], len(offsets))
    assert decoded.batch.schema.equals(ARROW_SCHEMA, check_metadata=True)


@decoder_settings
@given(
    st.lists(specs(tags=st.sampled_from(["a", "b", "c"])), min_size=1, max_size=12),
    pull_queues,
    st.sets(st.sampled_from(["a", "b", "c", "d"]), min_size=1),
    st.integers(0, 13),
)
def test_the_tag_filter_keeps_only_rows_whose_tag_is_wanted(
    messages: list[_Spec], queue: _Queue, wanted: set[str], end: int
) -> None:
    offsets = list(range(len(messages)))
    data = _encode(messages, offsets, queue)
    decoded = decode_batch(data, queue.topic, queue.broker, queue.queue_id, end=end, tags=wanted)
    assert decoded is not None
    expected = [
        m.queue_offset for m in decode_pulled(data, queue.broker) if m.tags in wanted and m.queue_offset < end
    ]
    assert decoded.batch.column("queue_offset").to_pylist() == expected
    assert decoded.offsets == tuple(offsets)  # the filter does not hide offsets from the gap check
    assert decoded.batch.schema.equals(ARROW_SCHEMA, check_metadata=True)


def _first_gap(offsets: list[int], expected_first: int) -> tuple[int, int]:
    present = set(offsets)
    missing = expected_first
    while missing in present:
        missing += 1
    after = [o for o in offsets if o > missing]
    return missing, min(after) if after else missing


@decoder_settings
@given(
    st.integers(0, 2**40),
    st.sets(st.integers(0, 40), min_size=1, max_size=12),
    specs(system_always=True),
    pull_queues,
)
def test_first_gap_is_the_first_missing_offset_and_the_next_present(
    expected_first: int, relative: set[int], spec: _Spec, queue: _Queue
) -> None:
    offsets = sorted(expected_first + r for r in relative)
    data = _encode([spec] * len(offsets), offsets, queue)
    decoded = decode_batch(data, queue.topic, queue.broker, queue.queue_id, end=2**62)
    assert decoded is not None
    assert decoded.first_gap(expected_first) == _first_gap(offsets, expected_first)


@pytest.mark.parametrize(
    ("offsets", "gap"),
    [([5, 6, 7], (8, 8)), ([5, 6, 9, 10], (7, 9)), ([7, 8], (5, 7)), ([5, 7, 9], (6, 7))],
)
def test_first_gap_examples(offsets: list[int], gap: tuple[int, int]) -> None:
    empty = pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)
    assert DecodedBatch(empty, pa.array(offsets, pa.int64())).first_gap(5) == gap


def test_an_empty_pull_body_decodes_to_none() -> None:
    assert decode_batch(b"", "t", "broker-a", 0, end=10) is None


@decoder_settings
@given(st.lists(specs(), min_size=1, max_size=6), pull_queues, st.data())
def test_a_body_cut_inside_a_record_raises_record_error(
    messages: list[_Spec], queue: _Queue, data: st.DataObject
) -> None:
    whole = _encode(messages, list(range(len(messages))), queue)
    last = _encode(messages[-1:], [0], queue)
    cut = data.draw(st.integers(len(whole) - len(last) + 1, len(whole) - 1), label="cut at")
    with pytest.raises(RecordError):
        decode_pulled(whole[:cut], queue.broker)  # the reference refuses it too
    with pytest.raises(RecordError):
        decode_batch(whole[:cut], queue.topic, queue.broker, queue.queue_id, end=2**62)


@pytest.mark.parametrize("body_length", [2**31 - 50, 2**31 - 1, -1, 0, 99, 101, 5000])
def test_a_wrong_body_length_inside_a_whole_record_raises_record_error(body_length: int) -> None:
    # 2**31 - 50 once wrapped the int32 offsets of the Arrow walk and crashed the process.
    spec = _Spec(b"x" * 100, {"a": "b"}, "T", ("k",), "U" * 32, 1, 2, 3, 0, (0, 1, 2, 3))
    queue = _Queue("t", "broker-a", 0, encode_host("10.0.0.1", 10911), 0)
    first, middle, last = _records([spec] * 3, [0, 1, 2], queue)
    spoilt = bytearray(middle)
    struct.pack_into(">i", spoilt, _BODY_LENGTH_AT, body_length)
    data = first + bytes(spoilt) + last
    with pytest.raises(RecordError):
        decode_pulled(data, queue.broker)  # the reference refuses it too
    with pytest.raises(RecordError):
        decode_batch(data, queue.topic, queue.broker, queue.queue_id, end=2**62)


@pytest.mark.parametrize("include_properties", [False, True])
def test_the_arrow_schema_is_exactly_the_declared_one(include_properties: bool) -> None:
    spec = _Spec(b"x" * 5000, {"a": "b"}, "T", ("k",), "U" * 32, 1, 2, 3, 0, (0, 1, 2, 3))
    queue = _Queue("t", "broker-a", 0, encode_host("10.0.0.1", 10911), 0)
    decoded = decode_batch(
        _encode([spec], [0], queue), "t", "broker-a", 0, end=1, include_properties=include_properties
    )
    assert decoded is not None
    assert decoded.batch.schema.equals(ARROW_SCHEMA, check_metadata=True)
    assert [f.nullable for f in decoded.batch.schema] == [True] * len(ARROW_SCHEMA)
    assert decoded.batch.schema.field("born_timestamp").type == pa.timestamp("us", tz="UTC")


# --- the sink -----------------------------------------------------------------------------------------

targets = st.builds(WriteTarget, st.text(max_size=40), st.integers(0, 2**40), st.integers(0, 100_000))
rows = st.integers(0, 2**40)


@quick
@given(targets, rows)
def test_message_ids_are_32_upper_case_hex_digits_and_deterministic(target: WriteTarget, row: int) -> None:
    msg_id = message_id(target, row)
    assert re.fullmatch("[0-9A-F]{32}", msg_id)
    assert message_id(WriteTarget(target.job, target.batch, target.partition), row) == msg_id


@quick
@given(targets, rows, targets, rows)
def test_message_ids_differ_when_any_part_differs(
    a: WriteTarget, a_row: int, b: WriteTarget, b_row: int
) -> None:
    base = (a.job, a.batch, a.partition, a_row)
    other = (b.job, b.batch, b.partition, b_row)
    for part in range(4):
        changed = tuple(other[i] if i == part else base[i] for i in range(4))
        if changed != base:
            assert message_id(WriteTarget(*changed[:3]), changed[3]) != message_id(a, a_row)  # type: ignore[arg-type]


def test_check_columns_requires_a_body() -> None:
    with pytest.raises(OptionError, match="needs a 'body' column"):
        check_columns(["topic", "tags"], WriteOptions.parse({"topic": "t"}))


def test_check_columns_requires_a_topic_column_or_option() -> None:
    with pytest.raises(OptionError, match="give the 'topic' option or a 'topic' column"):
        check_columns(["body"], WriteOptions.parse({}))
    check_columns(["body"], WriteOptions.parse({"topic": "t"}))
    check_columns(["body", "topic"], WriteOptions.parse({}))


def test_check_columns_refuses_unknown_columns_by_name() -> None:
    with pytest.raises(OptionError) as caught:
        check_columns(["body", "topic", "size", "colour"], WriteOptions.parse({}))
    assert "['colour', 'size']" in str(caught.value)
    check_columns(["body", "topic", "tags", "keys", "properties"], WriteOptions.parse({}))


def test_messages_group_rows_by_topic_with_deterministic_uniq_keys() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "body": pa.array(["a", "b", "c"]),  # strings are sent as their UTF-8
            "topic": pa.array(["x", None, "x"]),
            "tags": pa.array([None, "T", ""]),
            "keys": pa.array([["k1", "k2"], None, []], pa.list_(pa.string())),
            "properties": pa.array([[("p", "1")], None, []], pa.map_(pa.string(), pa.string())),
        }
    )
    target = WriteTarget("job", 3, 1)
    grouped = {t: m for t, m, _ in _messages(batch, WriteOptions.parse({"topic": "fallback"}), target, 10)}
    assert sorted(grouped) == ["fallback", "x"]
    x, fallback = grouped["x"], grouped["fallback"]
    assert [(m.body, m.tags, m.keys) for m in x] == [(b"a", None, ["k1", "k2"]), (b"c", None, None)]
    assert [m.properties for m in x] == [
        {"p": "1", "UNIQ_KEY": message_id(target, 10)},
        {"UNIQ_KEY": message_id(target, 12)},
    ]
    assert [(m.topic, m.body, m.tags, m.properties) for m in fallback] == [
        ("fallback", b"b", "T", {"UNIQ_KEY": message_id(target, 11)})
    ]


def test_messages_refuse_a_null_body_or_a_row_without_a_topic() -> None:
    target = WriteTarget("job", 0, 0)
    null_body = pa.RecordBatch.from_pydict({"body": pa.array([b"a", None], pa.binary())})
    with pytest.raises(OptionError, match="row 6: body is null"):
        list(_messages(null_body, WriteOptions.parse({"topic": "t"}), target, 5))
    no_topic = pa.RecordBatch.from_pydict({"body": pa.array([b"a"]), "topic": pa.array([None], pa.string())})
    with pytest.raises(OptionError, match="row 0: topic is null"):
        list(_messages(no_topic, WriteOptions.parse({}), target, 0))


def test_a_row_goes_to_the_queue_its_id_picks_on_every_attempt_and_rows_spread_over_the_queues() -> None:
    routed = [MessageQueue("t", broker, q) for broker in ("broker-a", "broker-b") for q in range(4)]
    target = WriteTarget("query/t", 7, 1)
    keys = [message_id(target, row) for row in range(4000)]
    first = [queue_of(key, routed) for key in keys]
    # another attempt: new Message objects, the same ids, the same route
    again = [queue_of(message_id(WriteTarget("query/t", 7, 1), row), list(routed)) for row in range(4000)]
    assert first == again
    spread = Counter(first)
    assert set(spread) == set(routed)
    assert min(spread.values()) > 4000 // len(routed) // 2


def test_by_queue_keeps_the_order_of_each_queues_rows() -> None:
    routed = [MessageQueue("t", "broker-a", q) for q in range(3)]
    target = WriteTarget("job", 0, 0)
    ids = [message_id(target, row) for row in range(60)]
    messages = [Message("t", b"%d" % row, properties={"UNIQ_KEY": key}) for row, key in enumerate(ids)]
    grouped = _by_queue(messages, routed)
    assert sorted(m.body for chunk in grouped.values() for m in chunk) == sorted(m.body for m in messages)
    for queue, queued in grouped.items():
        assert all(queue_of(m.properties["UNIQ_KEY"], routed) == queue for m in queued)
        assert [int(m.body) for m in queued] == sorted(int(m.body) for m in queued)


_BIG = bytes(BATCH_MAX_BYTES + 200_000)
body_sizes = st.one_of(st.integers(0, 64), st.integers(0, 64), st.integers(50_000, BATCH_MAX_BYTES + 200_000))


@settings(max_examples=60, deadline=None)
@given(st.lists(body_sizes, max_size=700))
def test_chunks_respect_both_limits_keep_order_and_lose_nothing(sizes: list[int]) -> None:
    # memoryview slices of one buffer: big bodies without a copy each
    messages = [Message("t", memoryview(_BIG)[:n]) for n in sizes]  # type: ignore[arg-type]
    chunks = list(_chunks(messages))
    assert [m for chunk in chunks for m in chunk] == messages
    assert all(a is b for a, b in zip((m for chunk in chunks for m in chunk), messages, strict=True))
    for chunk in chunks:
        assert 1 <= len(chunk) <= BATCH_MAX_MESSAGES
        assert sum(len(m.body) for m in chunk) <= BATCH_MAX_BYTES or len(chunk) == 1
    for chunk, following in itertools.pairwise(chunks):
        # a chunk is closed only when the next message would break a limit
        full = len(chunk) == BATCH_MAX_MESSAGES
        assert full or sum(len(m.body) for m in chunk) + len(following[0].body) > BATCH_MAX_BYTES


def test_chunks_of_small_messages_hold_256_and_a_large_message_goes_alone() -> None:
    small = [Message("t", b"x") for _ in range(600)]
    assert [len(c) for c in _chunks(small)] == [256, 256, 88]
    large = Message("t", bytes(2 * BATCH_MAX_BYTES))
    assert [len(c) for c in _chunks([small[0], large, small[1]])] == [1, 1, 1]
    assert list(_chunks([])) == []


@pytest.mark.parametrize(
    ("status", "next_begin", "min_offset", "filtered", "resume"),
    [
        (PullStatus.FOUND, 20, 0, False, None),  # nothing lost
        (PullStatus.FOUND, 60, 50, False, 50),  # retention removed 10..49: continue at 50
        (PullStatus.OFFSET_ILLEGAL, 0, 0, False, 100),  # the queue shrank below the range: its end
        (PullStatus.NO_NEW_MSG, 10, 0, False, 100),
        (PullStatus.NO_MATCHED_MSG, 30, 0, False, 30),  # unfiltered, nothing there: a hole
        (PullStatus.NO_MATCHED_MSG, 30, 0, True, None),  # filtered: just nothing that matches
    ],
)
def test_where_a_range_read_continues_after_an_answer(
    status: PullStatus, next_begin: int, min_offset: int, filtered: bool, resume: int | None
) -> None:
    result = PullResult(status, next_begin, min_offset, 200, [])
    assert _lost_from(result, 10, 100, filtered) == resume
