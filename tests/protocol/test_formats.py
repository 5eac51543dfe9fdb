"""fastjson-flavoured JSON, Java .properties, crash-safe config files, and group names."""

from __future__ import annotations

import json
import logging
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.broker._json_config import load_json_config, save_json_config
from cometmq.errors import RecordError
from cometmq.javaprops import format_properties, parse_properties
from cometmq.protocol import fastjson
from cometmq.protocol.naming import group_name_error
from cometmq.protocol.properties import decode_properties, encode_properties, property_finder
from cometmq.protocol.record import MAX_INFLATED_BODY_SIZE, inflate_body


def test_fastjson_reads_unquoted_numeric_keys_but_not_inside_strings() -> None:
    text = '{"brokerAddrs":{0:"127.0.0.1:10911",1:"10.0.0.2:10911"},"note":"a,5:b {7:x}"}'
    with pytest.raises(ValueError):
        json.loads(text)
    assert fastjson.loads(text) == {
        "brokerAddrs": {"0": "127.0.0.1:10911", "1": "10.0.0.2:10911"},
        "note": "a,5:b {7:x}",
    }


@given(st.dictionaries(st.integers(-(2**31), 2**31), st.text(max_size=20), max_size=5))
def test_fastjson_legacy_form_round_trips(table: dict[int, str]) -> None:
    legacy = fastjson.dumps({"brokerAddrs": table}, numeric_keys_unquoted=True)
    assert fastjson.loads(legacy) == {"brokerAddrs": {str(k): v for k, v in table.items()}}


bracket_text = st.text(alphabet='[]{}"\\a,:')
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | bracket_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(bracket_text, inner, max_size=3),
    max_leaves=200,
)


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@given(json_values, st.integers(0, 80))
def test_fastjson_refuses_json_nested_deeper_than_its_limit(value: object, wrap: int) -> None:
    text = "[" * wrap + json.dumps(value) + "]" * wrap  # brackets inside strings are text, not depth
    depth = wrap + _depth(value)
    if depth <= fastjson.MAX_DEPTH:
        assert fastjson.loads(text) == json.loads(text)
    else:
        with pytest.raises(ValueError, match="nested deeper than 64 levels"):
            fastjson.loads(text)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000, "{1:" * 100_000, "{{" * 100_000])
def test_fastjson_refuses_deep_nesting_in_every_flavour_without_recursing(text: str) -> None:
    with pytest.raises(ValueError, match="nested deeper"):
        fastjson.loads(text)


def test_java_properties_separators_comments_escapes_and_continuations() -> None:
    text = (
        "# comment\n! also a comment\n"
        "a=1\n  b : 2\nc 3\nd=\n"
        "e = one \\\n    two\n"
        "f=\\u0041\\tB\n"
        "key\\ with\\ spaces=x\n"
    )
    assert parse_properties(text) == {
        "a": "1", "b": "2", "c": "3", "d": "", "e": "one two", "f": "A\tB", "key with spaces": "x",
    }  # fmt: skip


_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=20)


@given(st.dictionaries(_TEXT.filter(lambda k: k != ""), _TEXT.map(str.strip)))
def test_java_properties_written_read_back_as_they_were(values: dict[str, str]) -> None:
    assert parse_properties(format_properties(values)) == values


def test_a_corrupt_config_file_falls_back_to_its_backup(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config" / "topics.json"
    save_json_config(path, {"version": 1})
    save_json_config(path, {"version": 2})
    assert load_json_config(path) == {"version": 2}
    path.write_text('{"version": 3, tor')  # a torn write
    with caplog.at_level(logging.WARNING, "cometmq.broker"):
        assert load_json_config(path) == {"version": 1}  # the .bak holds the previous good version
    # A clear log line: which file was corrupt, and that its backup was used instead.
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{path} is corrupt" in m for m in messages), messages
    assert any("loaded topics.json from its backup" in m for m in messages), messages
    assert load_json_config(tmp_path / "missing.json") is None


_PROPERTY_TEXT = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)))


@given(
    st.dictionaries(_PROPERTY_TEXT.filter(bool), _PROPERTY_TEXT, max_size=6),
    st.lists(_PROPERTY_TEXT.filter(bool), min_size=1, max_size=3),
    st.integers(0, 6),
    st.booleans(),
)
def test_property_finder_reads_what_decoding_reads(
    props: dict[str, str], extra_names: list[str], how_many_known: int, trailing_separator: bool
) -> None:
    """Names that are there and names that are not, names that end or start like others."""
    names = [*list(props)[:how_many_known], *extra_names, *(name[1:] for name in props if len(name) > 1)]
    text = encode_properties(props) + ("\x02" if trailing_separator and props else "")
    found = {name.decode(): value.decode() for name, value in property_finder(*names)(text.encode())}
    decoded = decode_properties(text)
    assert found == {name: decoded[name] for name in names if name in decoded}


def test_property_finder_lists_a_repeated_name_twice_and_not_a_longer_one() -> None:
    text = "XTAGS\x01no\x02TAGS\x01a\x02KEYS\x01k\x02TAGS\x01b\x02TAGSX\x01no"
    assert decode_properties(text)["TAGS"] == "b"
    found = property_finder("TAGS", "KEYS")(text.encode())
    assert found == [(b"TAGS", b"a"), (b"KEYS", b"k"), (b"TAGS", b"b")]


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("GID_orders", None),
        ("%RETRY%GID|x-1", None),
        ("G" * 255, None),
        ("G" * 256, "longer than 255"),
        ("", "blank"),
        ("  ", "blank"),
        ("bad name", "illegal characters"),
        ("grüppe", "illegal characters"),
    ],
)
def test_group_names_follow_the_topic_characters_up_to_255_of_them(name: str, problem: str | None) -> None:
    error = group_name_error(name)
    assert (error is None) if problem is None else (error is not None and problem in error)


_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
_bean_keys = st.lists(
    st.tuples(st.text("abcdefgh", min_size=1, max_size=6), st.integers(0, 99) | st.text(max_size=5)),
    min_size=1,
    max_size=3,
    unique_by=lambda pair: pair[0],
).map(tuple)
_fastjson_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6) | _bean_keys, inner, max_size=3)
    ),
    max_leaves=12,
)


@given(_fastjson_values)
def test_fastjson_bean_keyed_maps_round_trip(value: object) -> None:
    """What dumps(bean_keys=True) writes (bean keys as objects, the form of Map<MessageQueue, ...>),
    loads reads back: bean keys as tuples of (property, value) pairs in written order."""
    assert fastjson.loads(fastjson.dumps(value, bean_keys=True)) == value


@given(st.dictionaries(_bean_keys, _fastjson_values, min_size=1, max_size=3), st.data())
def test_fastjson_refuses_a_cut_bean_keyed_map_with_value_error(value: object, data: st.DataObject) -> None:
    text = fastjson.dumps(value, bean_keys=True).decode()
    cut = data.draw(st.integers(0, len(text) - 1), label="cut at")
    with pytest.raises(ValueError):
        fastjson.loads(text[:cut])


def test_a_compressed_message_body_inflates_up_to_its_bound_and_no_further() -> None:
    body = b"a message body " * 1000
    assert inflate_body(zlib.compress(body)) == body
    assert inflate_body(memoryview(zlib.compress(body))) == body
    bomb = zlib.compress(bytes(MAX_INFLATED_BODY_SIZE + 1), 9)  # 64 MiB and a byte, in 64 KiB
    with pytest.raises(RecordError, match="inflates to more than 67108864 bytes"):
        inflate_body(bomb)
    with pytest.raises(RecordError, match="does not inflate"):
        inflate_body(b"not zlib")
    with pytest.raises(RecordError, match="truncated"):
        inflate_body(zlib.compress(body)[:-4])
    assert inflate_body(zlib.compress(bytes(1000)), limit=1000) == bytes(1000)  # exactly the bound
    with pytest.raises(RecordError, match="more than 1000 bytes"):
        inflate_body(zlib.compress(bytes(1001)), limit=1000)
