"""Subscriptions: what a consumer group asks of a topic, and the tag filter it implies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cometmq.protocol.jsonbody import as_object, java_long, java_string
from cometmq.protocol.naming import stored_topic_name_error, text_error
from cometmq.protocol.taghash import java_string_hash

SUB_ALL = "*"
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"


def parse_tag_expression(expression: str | None) -> tuple[frozenset[str], frozenset[int]] | None:
    """Tags and tag hash codes of ``TagA || TagB``; None when the expression matches every tag."""
    if expression is None or not expression.strip() or expression.strip() == SUB_ALL:
        return None
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    if not tags:
        return None
    return tags, frozenset(java_string_hash(tag) for tag in tags)


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    expression_type: str = EXPRESSION_TAG
    sub_version: int = 0
    tags: frozenset[str] = field(default_factory=frozenset)
    codes: frozenset[int] | None = None  # None: every message matches

    @classmethod
    def from_expression(
        cls, topic: str, expression: str | None, expression_type: str | None = None, sub_version: int = 0
    ) -> SubscriptionData:
        kind = (expression_type or EXPRESSION_TAG).upper()
        if kind != EXPRESSION_TAG:  # SQL92 is kept as written: an empty one is an error, not "*"
            return cls(topic, expression or "", kind, sub_version)
        sub = cls(topic, (expression or SUB_ALL).strip() or SUB_ALL, kind, sub_version)
        parsed = parse_tag_expression(expression)
        if parsed is not None:
            sub.tags, sub.codes = parsed
        return sub

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SubscriptionData:
        """From a heartbeat's SubscriptionData (C++ sends subVersion as a string); :class:`BodyError`
        for a field that is not of its Java type, a topic no broker could keep, or an expression that
        is not text."""
        what = "SubscriptionData"
        obj = as_object(obj, what)
        return cls.from_expression(
            java_string(obj, "topic", what, name_rule=stored_topic_name_error),
            java_string(obj, "subString", what, default="", name_rule=text_error),
            java_string(obj, "expressionType", what, default=""),
            java_long(obj, "subVersion", what, default=0),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "codeSet": sorted(self.codes or ()),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags),
            "topic": self.topic,
        }
