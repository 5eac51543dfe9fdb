"""Every string a JSON body may carry, lone UTF-16 surrogates included, is written as UTF-8 and read
back the same."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from cometmq.protocol import fastjson

# Any code point, lone surrogates too (what a JSON escape such as "\ud800" gives when a request is
# read), which a uniform draw would rarely pick.
LONE_SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
# A high surrogate right before a low one is not lone: as in Java's UTF-16, the two read back as one
# character.
ANY_TEXT = st.text(st.characters(exclude_categories=()) | LONE_SURROGATES, max_size=20).filter(
    lambda text: re.search("[\ud800-\udbff][\udc00-\udfff]", text) is None
)


@given(st.dictionaries(ANY_TEXT, ANY_TEXT | st.lists(ANY_TEXT, max_size=3), max_size=5))
def test_json_bodies_hold_any_text(table: dict[str, object]) -> None:
    body = fastjson.dumps({"table": table})
    body.decode("utf-8")  # UTF-8 throughout: a lone surrogate is written as its escape
    assert fastjson.loads(body) == {"table": table}


@given(st.dictionaries(st.integers(0, 99), ANY_TEXT, max_size=5))
def test_fastjson_style_bodies_hold_any_text(table: dict[int, str]) -> None:
    body = fastjson.dumps(table, numeric_keys_unquoted=True)
    body.decode("utf-8")
    assert fastjson.loads(body) == {str(key): value for key, value in table.items()}
