"""The batch send fast path (``_batch_columns``) against the general path it stands in for.

The fast path finds TAGS, KEYS and UNIQ_KEY in a batch body's bytes instead of decoding, merging and
encoding each message's properties; whatever it hands the store must be what the general path
(``_batch_message`` per entry, then ``MessageBatch.of``) would have handed it, for any properties a
client can send, as far as any reader can tell; what it cannot take as it is (stray separators,
properties that are not UTF-8, WAIT/DELAY/TRAN_MSG) it leaves to the general path. A real batch
through a real broker is covered in test_send_pull.py and test_query_message.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.broker._send import SendProcessor, _batch_columns, _SendHeader
from cometmq.broker.broker import Broker
from cometmq.broker.config import BrokerConfig
from cometmq.errors import ProtocolError
from cometmq.protocol.batch import BatchEntry, decode_batch_body, encode_batch_body
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.store import MessageBatch

REQUEST_PROPERTIES = {"CLUSTER": "DefaultCluster"}
SUFFIX = encode_properties(REQUEST_PROPERTIES).encode()


def header() -> _SendHeader:
    born_host = b"\x7f\0\0\1\0\0\x30\x39"
    store_host = b"\x7f\0\0\1\0\0\x2a\x9f"
    return _SendHeader("Orders", 1, 0, 1_700_000_000_000, born_host, store_host, 0)


@pytest.fixture(scope="module")
def processor(tmp_path_factory: pytest.TempPathFactory) -> SendProcessor:
    # A broker that is never started: _batch_message only reads its configuration.
    return SendProcessor(Broker(BrokerConfig(store_path_root_dir=str(tmp_path_factory.mktemp("broker")))))


def general(processor: SendProcessor, data: bytes) -> MessageBatch:
    entries = decode_batch_body(data)
    batch = MessageBatch.of([processor._batch_message(e, header(), REQUEST_PROPERTIES) for e in entries])
    assert batch is not None
    return batch


def comparable(batch: MessageBatch) -> tuple[object, ...]:
    return (
        batch.topic,
        batch.queue_id,
        batch.sys_flag,
        batch.born_timestamp,
        batch.born_host,
        batch.store_host,
        batch.reconsume_times,
        batch.flags,
        [bytes(body) for body in batch.bodies],
        # As every reader decodes them: the fast path keeps a message's text (a repeated name stays
        # repeated) where the general path writes each name once.
        [decode_properties(text.decode()) for text in batch.properties],
        batch.tags_codes,
        batch.index_keys,
        batch.index_owners,
    )


# Names that the fast path looks for, names that end like them, and ordinary ones.
_NAMES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "XTAGS", "MYKEYS", "A_UNIQ_KEY", "color", "k"])
_VALUES = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12)
_KEYS_VALUES = st.lists(st.sampled_from(["", "k1", "k2", "ключ"]), max_size=4).map(" ".join)


@st.composite
def properties_text(draw: st.DrawFn) -> str:
    pairs = draw(st.lists(st.tuples(_NAMES, _VALUES | _KEYS_VALUES), max_size=6))
    # Names may repeat (the last wins); Java writes no trailing separator, C++ one after every pair.
    text = "\x02".join(f"{name}\x01{value}" for name, value in pairs)
    if pairs and draw(st.booleans()):
        text += "\x02"
    return text


@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=40), properties_text()), min_size=1))
def test_fast_path_hands_the_store_what_the_general_path_does(
    processor: SendProcessor, messages: list[tuple[int, bytes, str]]
) -> None:
    data = encode_batch_body([BatchEntry(flag, body, text) for flag, body, text in messages])
    fast = _batch_columns(data, header(), SUFFIX)
    assert fast is not None
    assert comparable(fast) == comparable(general(processor, data))


# Property texts with separators anywhere: pairs without a name-value separator, values holding one.
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=8),
            st.lists(_NAMES | st.sampled_from(["v", "\x01", "\x02"]), max_size=12).map("".join),
        ),
        min_size=1,
    )
)
def test_properties_with_stray_separators_take_the_fast_path_only_where_both_paths_agree(
    processor: SendProcessor, messages: list[tuple[bytes, str]]
) -> None:
    data = encode_batch_body([BatchEntry(0, body, text) for body, text in messages])
    fast = _batch_columns(data, header(), SUFFIX)
    if fast is not None:
        # The general path accepts it (it refuses a value holding \x01) and hands over the same.
        assert comparable(fast) == comparable(general(processor, data))


def test_a_value_holding_a_name_value_separator_leaves_the_batch_to_the_general_path() -> None:
    for text in ("TAGS\x01a\x01b", "k\x01\x01", "a\x01b\x01c\x02junk", "junk\x02TAGS\x01t"):
        data = encode_batch_body([BatchEntry(0, b"a", "TAGS\x01t"), BatchEntry(0, b"b", text)])
        assert _batch_columns(data, header(), SUFFIX) is None, text


@pytest.mark.parametrize("name", ["WAIT", "DELAY", "TRAN_MSG", "MY_DELAY"])
def test_a_message_naming_wait_delay_or_a_transaction_leaves_the_batch_to_the_general_path(name: str) -> None:
    data = encode_batch_body([BatchEntry(0, b"a", "TAGS\x01t"), BatchEntry(0, b"b", f"{name}\x012")])
    assert _batch_columns(data, header(), SUFFIX) is None


def test_properties_that_are_not_utf8_leave_the_batch_to_the_general_path_which_refuses_it() -> None:
    good = encode_batch_body([BatchEntry(0, b"a", "TAGS\x01t")])
    # Same length as "TAGS\x01t", last byte replaced by a lone continuation byte.
    data = good[:-1] + b"\x80"
    assert _batch_columns(data, header(), SUFFIX) is None
    with pytest.raises(ProtocolError, match="not UTF-8"):
        decode_batch_body(data)


def test_a_malformed_body_is_refused_with_the_entry_that_is_wrong() -> None:
    data = encode_batch_body([BatchEntry(0, b"a", ""), BatchEntry(0, b"bb", "TAGS\x01t")])
    second = len(encode_batch_body([BatchEntry(0, b"a", "")]))
    cut = data[:-1]
    with pytest.raises(ProtocolError, match=f"at byte {second} has inconsistent lengths"):
        _batch_columns(cut, header(), SUFFIX)


def test_bodies_are_views_of_the_request_not_copies(tmp_path: Path) -> None:
    data = encode_batch_body([BatchEntry(0, b"x" * 100, "TAGS\x01t")])
    fast = _batch_columns(data, header(), SUFFIX)
    assert fast is not None
    (body,) = fast.bodies
    assert isinstance(body, memoryview) and body.obj is data and bytes(body) == b"x" * 100
