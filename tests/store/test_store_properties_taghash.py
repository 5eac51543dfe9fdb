"""Properties codec (docs/protocol.md#properties) and the Java tag hash (docs/protocol.md#tag-hash)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.protocol.properties import decode_properties, encode_properties
from cometmq.protocol.taghash import java_string_hash


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TagA", 2598919),  # observed from the JS client's codeSet
        ("", 0),
        ("a", 97),
        ("hello world", 1794106052),
        ("polygenelubricants", -(2**31)),  # wraps to Integer.MIN_VALUE in Java
        ("\U0001f600", 31 * 0xD83D + 0xDE00),  # non-BMP: two UTF-16 code units
        ("é", 0xE9),
    ],
)
def test_java_string_hash_known_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def _reference_hash(text: str) -> int:
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (h * 31 + int.from_bytes(data[i : i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


@given(st.text())
def test_java_string_hash_matches_reference(text: str) -> None:
    assert java_string_hash(text) == _reference_hash(text)
    assert -(2**31) <= java_string_hash(text) < 2**31


def test_encode_is_java_form() -> None:
    assert encode_properties({"TAGS": "TagA", "KEYS": "k1 k2"}) == "TAGS\x01TagA\x02KEYS\x01k1 k2"
    assert encode_properties({}) == ""
    with pytest.raises(ValueError):
        encode_properties({"A": "x\x02y"})


def test_decode_accepts_trailing_separator_and_junk() -> None:
    assert decode_properties("TAGS\x01TagA\x02KEYS\x01k\x02") == {"TAGS": "TagA", "KEYS": "k"}
    assert decode_properties("") == {}
    assert decode_properties("junk\x02A\x01b") == {"A": "b"}


plain = st.text(st.characters(exclude_characters="\x01\x02"), max_size=20)


@given(st.dictionaries(plain, plain, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props
    # The C++/JS form (a separator after every pair) decodes to the same map.
    cpp_form = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
    assert decode_properties(cpp_form) == props
