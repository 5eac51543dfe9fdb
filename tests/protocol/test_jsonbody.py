"""Reading JSON body fields as Java types: anything JSON can hold either reads as a value of the
field's type within its bounds, or fails with one BodyError naming the body and field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cometmq.protocol.codes import ResponseCode
from cometmq.protocol.jsonbody import (
    BodyError,
    java_bool,
    java_int,
    java_list,
    java_long,
    java_string,
    json_object,
)
from cometmq.protocol.naming import group_name_error
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from cometmq.protocol.topic_config import TopicConfig

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=50)
    | st.integers().map(str),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@given(json_values)
def test_an_int_field_reads_within_its_bounds_or_fails_with_a_body_error(value: Any) -> None:
    try:
        number = java_int({"n": value}, "n", "Thing", default=7, minimum=0, maximum=1024)
    except BodyError as exc:
        assert exc.code == ResponseCode.SYSTEM_ERROR
        assert str(exc).startswith("the Thing field n")
        return
    assert 0 <= number <= 1024


@given(json_values)
def test_a_long_field_reads_within_the_java_range_or_fails_with_a_body_error(value: Any) -> None:
    try:
        number = java_long({"n": value}, "n", "Thing")
    except BodyError as exc:
        assert "the Thing field n" in str(exc)
        return
    assert -(2**63) <= number < 2**63


@given(json_values)
def test_strings_booleans_and_lists_read_or_fail_with_a_body_error(value: Any) -> None:
    for read in (
        lambda: java_string({"s": value}, "s", "Thing", name_rule=group_name_error),
        lambda: java_bool({"s": value}, "s", "Thing", default=False),
        lambda: java_list({"s": value}, "s", "Thing", max_items=2),
    ):
        try:
            read()
        except BodyError as exc:
            assert "Thing" in str(exc)


@pytest.mark.parametrize(
    ("value", "remark"),
    [
        ("12x", "the Thing field n='12x' is not a Java int"),
        (1.5, "the Thing field n is not a Java int"),
        (True, "the Thing field n is not a Java int"),
        (-1, "the Thing field n=-1 is below 0"),
        (2**31, f"the Thing field n={2**31} is above 1024"),
        ("9" * 5000, "is not a Java int"),  # longer than int() reads
    ],
)
def test_an_int_field_remark_names_the_field_and_what_is_wrong(value: object, remark: str) -> None:
    with pytest.raises(BodyError) as refused:
        java_int({"n": value}, "n", "Thing", minimum=0, maximum=1024)
    assert remark in refused.value.remark


def test_numbers_may_come_as_text_and_null_is_absent() -> None:
    assert java_int({"n": " 42"}, "n", "Thing") == 42
    assert java_long({"n": "-5"}, "n", "Thing") == -5
    assert java_int({"n": None}, "n", "Thing", default=3) == 3
    assert java_string({"s": 12}, "s", "Thing") == "12"
    assert java_bool({"b": "TRUE"}, "b", "Thing", default=False) is True
    with pytest.raises(BodyError, match="the Thing field s is missing"):
        java_string({"s": None}, "s", "Thing")


def test_a_body_that_is_not_a_json_object_is_refused_in_plain_words() -> None:
    for body in (b"{", b"\xff", b"[]", b"null"):
        with pytest.raises(BodyError, match=r"^the Thing (body is not JSON|is not a JSON object)$"):
            json_object(body, "Thing")


def test_a_group_config_keeps_its_counts_within_bounds() -> None:
    config = SubscriptionGroupConfig.from_json({"groupName": "G", "retryQueueNums": "0", "brokerId": 1})
    assert (config.retry_queue_nums, config.broker_id) == (0, 1)
    with pytest.raises(BodyError, match="retryQueueNums=1000000 is above 1024"):
        SubscriptionGroupConfig.from_json({"groupName": "G", "retryQueueNums": 1_000_000})
    with pytest.raises(BodyError, match="the SubscriptionGroupConfig field groupName is missing"):
        SubscriptionGroupConfig.from_json({"groupName": None})


def test_a_topic_config_keeps_its_perm_to_rocketmqs_bits() -> None:
    assert TopicConfig.from_json({"topicName": "T", "perm": 7}).perm == 7
    for perm in (8, -1, 2**63):
        with pytest.raises(BodyError, match="the TopicConfig field perm="):
            TopicConfig.from_json({"topicName": "T", "perm": perm})
    with pytest.raises(BodyError, match="readQueueNums=-1 is below 0"):
        TopicConfig.from_json({"topicName": "T", "readQueueNums": -1})
