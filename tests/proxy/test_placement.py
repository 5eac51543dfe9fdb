"""The pure parts of sending through the proxy: where a message group's messages go, and how a
v2.Message's timestamps are read."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy._convert import outgoing_message
from cometmq.proxy._routes import consistent_hash

JAVA_LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(JAVA_LONGS, st.integers(min_value=1, max_value=1000))
def test_a_key_hashes_into_the_buckets(key: int, buckets: int) -> None:
    assert 0 <= consistent_hash(key, buckets) < buckets


@given(JAVA_LONGS, st.integers(min_value=1, max_value=500))
def test_a_new_bucket_takes_keys_only_for_itself(key: int, buckets: int) -> None:
    # Guava's consistent hash: with one bucket more, a key stays where it was or moves to the new one.
    before, after = consistent_hash(key, buckets), consistent_hash(key, buckets + 1)
    assert after in (before, buckets)


def test_one_bucket_takes_every_key() -> None:
    assert {consistent_hash(key, 1) for key in range(-50, 50)} == {0}


def _message(**system: object) -> v2.Message:
    return v2.Message(
        topic=v2.Resource(name="T"),
        body=b"x",
        system_properties=v2.SystemProperties(message_id="ID", **system),  # type: ignore[arg-type]
    )


def test_delivery_timestamp_is_read_in_milliseconds() -> None:
    sent = _message(message_type=v2.DELAY)
    sent.system_properties.delivery_timestamp.seconds = 1_700_000_000
    sent.system_properties.delivery_timestamp.nanos = 250_000_000
    assert outgoing_message(sent, "T", "").properties["TIMER_DELIVER_MS"] == "1700000000250"


def test_a_born_timestamp_becomes_the_sends_born_time() -> None:
    sent = _message()
    sent.system_properties.born_timestamp.FromMilliseconds(1_700_000_000_123)
    outgoing = outgoing_message(sent, "T", "10.0.0.1:5000")
    assert outgoing.born_timestamp_ms == 1_700_000_000_123
    assert outgoing.properties["BORN_TIMESTAMP"] == "1700000000123"
    assert outgoing.properties["__BORNHOST"] == "10.0.0.1:5000"  # the peer, when the client names none
