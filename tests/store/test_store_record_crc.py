"""The record CRC (RocketMQ 5's ``enabledAppendPropCRC`` / ``forceVerifyPropCRC``): written by the
store on every put and batch, checked by recovery when either key is set, unforgeable by clients."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from store_testlib import SMALL_COMMITLOG, bodies, crash, make_msg
from test_store_record import encode, records

from cometmq.broker import Broker
from cometmq.broker.config import BrokerConfig
from cometmq.errors import RecordError
from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.record import (
    carries_record_crc,
    decode_records,
    record_crc_matches,
    seal_record_crc,
    with_record_crc_property,
    without_record_crc_property,
)
from cometmq.store import FlushDiskType, MessageStore, PutResult

OpenStore = Callable[..., MessageStore]


def rocketmq_crc_property(record: bytes) -> bytes:
    """The 20 bytes RocketMQ's MessageDecoder.createCrc32 writes for *record* (its last 20 bytes
    being the property), computed here the way its Java loop does."""
    crc = zlib.crc32(record[:-20]) & 0x7FFFFFFF
    digits = bytearray()
    for _ in range(10):
        digits.append(ord("0") + (crc % 10 if crc > 0 else 0))
        crc //= 10
    return b"__CRC32#\x01" + bytes(digits) + b"\x02"


def sealed(fields: dict[str, object]) -> bytes:
    """A record with *fields* whose properties end with a record CRC, sealed."""
    props = with_record_crc_property(str(fields["properties"]).encode()).decode()
    data = bytearray(encode({**fields, "properties": props}))
    seal_record_crc(data, 0, len(data))
    return bytes(data)


# -- the codec -------------------------------------------------------------------------------------


@given(records())
def test_a_sealed_record_ends_with_the_crc_property_rocketmq_writes(fields: dict[str, object]) -> None:
    data = sealed(fields)
    assert data[-20:] == rocketmq_crc_property(data)
    (rec,) = decode_records(data, check_crc=True)
    assert carries_record_crc(rec.properties)
    assert record_crc_matches(memoryview(data), 0, len(data))
    # A property like any other to whoever reads the properties, after the message's own.
    props = decode_properties(rec.properties)
    assert props.pop("__CRC32#") == data[-11:-1].decode()
    assert props == decode_properties(str(fields["properties"]))


@given(records(), st.data())
def test_any_changed_byte_of_a_sealed_record_is_caught_or_leaves_no_crc_to_trust(
    fields: dict[str, object], data: st.DataObject
) -> None:
    record = bytearray(sealed(fields))
    at = data.draw(st.integers(0, len(record) - 1))
    record[at] ^= data.draw(st.integers(1, 255))
    try:
        (rec,) = decode_records(bytes(record), check_crc=True)
    except RecordError:
        return  # caught by the body CRC or the lengths already
    if carries_record_crc(rec.properties):
        assert not record_crc_matches(memoryview(record), 0, len(record))
    else:
        # A change to the property's own name or separators: the record no longer carries a CRC,
        # which forceVerifyPropCRC refuses (tests below).
        assert at >= len(record) - 21


@given(
    st.dictionaries(st.text("abcKEYS_", min_size=1, max_size=8), st.text("xyz 01", max_size=8), max_size=4)
)
def test_a_clients_crc_property_is_taken_out_and_the_rest_kept_in_order(props: dict[str, str]) -> None:
    for at in range(len(props) + 1):
        items = list(props.items())
        items.insert(at, ("__CRC32#", "1234567890"))
        given_props = encode_properties(dict(items)).encode()
        assert without_record_crc_property(given_props) == encode_properties(props).encode()
    assert without_record_crc_property(encode_properties(props).encode()) == encode_properties(props).encode()


# -- the store ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(FlushDiskType))
def test_every_put_and_batch_is_sealed_when_enabled(open_store: OpenStore, mode: FlushDiskType) -> None:
    store = open_store(flush_disk_type=mode, enabled_append_prop_crc=True)
    # A client's own __CRC32# (a forgery, or a copy of a consumed message) never reaches the record.
    forged = "TAGS\x01a\x02__CRC32#\x010000000001\x02"
    single = store.put(make_msg("T", 0, b"single", forged))
    batch = store.put_batch([make_msg("T", 1, b"b%d" % i, forged if i else "KEYS\x01k") for i in range(5)])
    offset, records = single.commitlog_offset, []
    while offset < batch.commitlog_offset + batch.wrote_bytes:
        view = store.message_at(offset)
        assert view is not None
        records.append(bytes(view))
        offset += len(view)
    assert len(records) == 6
    for record in records:
        assert record[-20:] == rocketmq_crc_property(record)
        (rec,) = decode_records(record, check_crc=True)
        assert rec.properties.count("__CRC32#") == 1


def test_records_are_not_sealed_by_default_but_a_clients_crc_property_is_still_taken_out(
    open_store: OpenStore,
) -> None:
    store = open_store()
    res = store.put(make_msg("T", 0, b"x", "TAGS\x01a\x02__CRC32#\x010000000001\x02"))
    view = store.message_at(res.commitlog_offset)
    assert view is not None
    (rec,) = decode_records(bytes(view), check_crc=True)
    assert rec.properties == "TAGS\x01a\x02"


def test_broker_conf_keys_reach_the_store(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("enabledAppendPropCRC=true\nforceVerifyPropCRC=true\n")
    config = BrokerConfig.from_file(conf, {"storePathRootDir": str(tmp_path / "data")})
    store_config = Broker(config).store._config
    assert (store_config.enabled_append_prop_crc, store_config.force_verify_prop_crc) == (True, True)


# -- recovery --------------------------------------------------------------------------------------


def fill(store: MessageStore, count: int) -> list[PutResult]:
    return [store.put(make_msg("T", 0, i.to_bytes(4, "big") * 50, f"TAGS\x01t{i % 3}")) for i in range(count)]


def damage(root: Path, res: PutResult, at_from_end: int, value: bytes) -> None:
    """Overwrite bytes of *res*'s record, *at_from_end* bytes before its end."""
    seg = root / "commitlog" / f"{res.commitlog_offset - res.commitlog_offset % SMALL_COMMITLOG:020d}"
    with seg.open("r+b") as f:
        f.seek(res.commitlog_offset % SMALL_COMMITLOG + res.wrote_bytes - at_from_end)
        f.write(value)


@pytest.mark.parametrize(
    "props",
    [
        "TAGS\x01a\x02Y__CRC32#\x010123456789\x02",  # a name ending like it
        "TAGS\x01a\x02K\x01__CRC32#\x010123456789\x02",  # a value like it
    ],
)
def test_a_look_alike_is_not_taken_for_a_record_crc(open_store: OpenStore, props: str) -> None:
    assert not carries_record_crc(props)
    store = open_store()
    results = fill(store, 10)
    results.append(store.put(make_msg("T", 0, b"look-alike", props)))
    results += fill(store, 10)
    crash(store)
    store = open_store(enabled_append_prop_crc=True, force_verify_prop_crc=False)
    assert store.commitlog_max_offset == results[-1].commitlog_offset + results[-1].wrote_bytes
    assert len(bodies(store, "T", 0)) == 21


@pytest.mark.parametrize("checking", [True, False])
def test_a_changed_property_ends_the_log_only_when_the_record_crc_is_checked(
    open_store: OpenStore, tmp_path: Path, checking: bool
) -> None:
    store = open_store(enabled_append_prop_crc=True)
    results = fill(store, 300)
    crash(store)
    bad = results[250]
    # "TAGS\x01t1" becomes "TAGS\x01t9": valid UTF-8, lengths intact, the body CRC still matches.
    # The tag's last byte comes before the separator and the record CRC added after it.
    damage(tmp_path / "store", bad, 1 + 21, b"9")
    (tmp_path / "store" / "checkpoint").unlink()  # scan from the first record
    store = open_store(enabled_append_prop_crc=checking)
    if checking:
        assert store.commitlog_max_offset == bad.commitlog_offset
        assert len(bodies(store, "T", 0)) == 250
    else:  # neither key set: the body CRC alone lets the damaged record through, as in RocketMQ
        assert store.commitlog_max_offset == results[-1].commitlog_offset + results[-1].wrote_bytes
        view = store.message_at(bad.commitlog_offset)
        assert view is not None
        assert decode_records(bytes(view))[0].properties.startswith("TAGS\x01t9")


@pytest.mark.parametrize("force", [True, False])
def test_forcing_the_check_drops_a_record_whose_crc_property_was_lost(
    open_store: OpenStore, tmp_path: Path, force: bool
) -> None:
    """A torn write that left zeros where the last 20 bytes were: the property is gone, every length
    still adds up and the body CRC matches. Only forceVerifyPropCRC tells it from an unsealed record."""
    store = open_store(enabled_append_prop_crc=True)
    results = fill(store, 300)
    crash(store)
    torn = results[-3]
    damage(tmp_path / "store", torn, 20, bytes(20))
    store = open_store(enabled_append_prop_crc=True, force_verify_prop_crc=force)
    end = results[-1].commitlog_offset + results[-1].wrote_bytes
    assert store.commitlog_max_offset == (torn.commitlog_offset if force else end)
    assert len(bodies(store, "T", 0)) == (297 if force else 300)


def test_forcing_the_check_after_a_clean_shutdown_keeps_sealed_records(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = open_store(enabled_append_prop_crc=True)
    results = fill(store, 100)
    store.shutdown()
    store = open_store(enabled_append_prop_crc=True, force_verify_prop_crc=True)
    assert store.commitlog_max_offset == results[-1].commitlog_offset + results[-1].wrote_bytes
    assert len(bodies(store, "T", 0)) == 100


def test_a_changed_property_in_the_last_segment_ends_the_log_after_a_clean_shutdown(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """The clean start's check of the last segment checks record CRCs too, not only the crash scan."""
    store = open_store(enabled_append_prop_crc=True)
    results = fill(store, 300)
    store.shutdown()
    bad = results[-5]
    damage(tmp_path / "store", bad, 1 + 21, b"9")  # as above: the tag's last byte
    store = open_store(enabled_append_prop_crc=True)
    assert store.commitlog_max_offset == bad.commitlog_offset
    assert len(bodies(store, "T", 0)) == 295
