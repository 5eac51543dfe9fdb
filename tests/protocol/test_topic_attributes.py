"""Topic attributes: RocketMQ 5's ``+name=value,-name`` changes, and ``attributes`` in a TopicConfig's
JSON."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.protocol.jsonbody import BodyError
from cometmq.protocol.topic_config import (
    TOPIC_ATTRIBUTES,
    TopicConfig,
    altered_attributes,
    parse_attribute_changes,
)

known_settings = st.sampled_from(
    [(name, value) for name, values in TOPIC_ATTRIBUTES.items() for value in sorted(values)]
)


@given(
    st.lists(known_settings, unique_by=lambda pair: pair[0]),
    st.sets(st.sampled_from(sorted(TOPIC_ATTRIBUTES))),
)
def test_changes_parse_to_what_they_set_and_remove(sets: list[tuple[str, str]], removes: set[str]) -> None:
    removes -= {name for name, _ in sets}
    text = ",".join([f"+{name}={value}" for name, value in sets] + [f"-{name}" for name in sorted(removes)])
    assert parse_attribute_changes(text) == {**dict(sets), **dict.fromkeys(removes)}


@given(st.text(max_size=40))
def test_any_text_parses_or_fails_with_a_value_error(text: str) -> None:
    try:
        changes = parse_attribute_changes(text)
    except ValueError as exc:
        assert str(exc)
    else:
        for name, value in changes.items():
            assert name in TOPIC_ATTRIBUTES
            assert value is None or value in TOPIC_ATTRIBUTES[name]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("+dedup=true", "unknown topic attribute 'dedup'"),
        ("+deduplication=1", "takes false or true, not '1'"),
        ("+deduplication", "is not +name=value"),
        ("deduplication=true", "starts with neither + (set) nor - (remove)"),
        ("+deduplication=true,-deduplication", "deduplication is given twice"),
        ("-deduplication=true", "is not -name"),
        ("-0", "unknown topic attribute '0'"),
    ],
)
def test_malformed_changes_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_attribute_changes(text)


def test_changes_alter_the_current_attributes() -> None:
    current = {"deduplication": "true", "message.type": "NORMAL"}
    changes = parse_attribute_changes("+deduplication=false,-message.type")
    assert altered_attributes(current, changes) == {"deduplication": "false"}
    assert current == {"deduplication": "true", "message.type": "NORMAL"}
    with pytest.raises(ValueError, match="cannot be removed: the topic does not carry it"):
        altered_attributes({}, parse_attribute_changes("-deduplication"))


def test_attributes_round_trip_through_json_and_are_left_out_when_there_are_none() -> None:
    topic = TopicConfig("T", attributes={"deduplication": "true", "some.other": "x"})
    assert TopicConfig.from_json(topic.to_json()) == topic
    assert "attributes" not in TopicConfig("T").to_json()
    assert TopicConfig.from_json({"topicName": "T", "attributes": None}).attributes == {}


@pytest.mark.parametrize("attributes", [[], "x", {"deduplication": True}, {"deduplication": 1}])
def test_attributes_that_are_not_an_object_of_strings_are_refused(attributes: Any) -> None:
    with pytest.raises(BodyError, match=r"attributes|attribute deduplication"):
        TopicConfig.from_json({"topicName": "T", "attributes": attributes})
