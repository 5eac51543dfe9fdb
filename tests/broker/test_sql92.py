"""The SQL92 filter (cometmq.broker.sql92): grammar, RocketMQ's semantics, and its one error class.

The property tests pit the compiled closures against ``reference_eval`` below: a deliberately plain
tree walk over Java-typed values that follows RocketMQ 4.9.x's expression classes step by step.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cometmq.broker.sql92 import MAX_DEPTH, Sql92Filter, compile_sql92
from cometmq.errors import CometMQError, Sql92Error

# --- operators, one by one -------------------------------------------------------------------------

OPERATOR_CASES = [
    # = and <> on strings
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "y"}, False),
    ("a <> 'x'", {"a": "y"}, True),
    ("a <> 'x'", {"a": "x"}, False),
    ("TAGS = 'it''s'", {"TAGS": "it's"}, True),
    ("a = ''", {"a": ""}, True),
    # numbers: properties are converted to the literal's Java type
    ("a = 5", {"a": "5"}, True),
    ("a = 5", {"a": "+5"}, True),
    ("a = 5", {"a": "05"}, True),
    ("a > 5", {"a": "6"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a < 5", {"a": "-7"}, True),
    ("a <= -5", {"a": "-5"}, True),
    ("a > 3000000000", {"a": "3000000001"}, True),
    ("a > 5L", {"a": "6"}, True),
    ("a > 5.0", {"a": "5.5"}, True),
    ("a = 1.5", {"a": " 1.5 "}, True),  # Double.valueOf trims
    ("a = 1.5", {"a": "1.5d"}, True),  # and takes Java's suffixes
    ("a > 1E3", {"a": "1001"}, True),
    ("a > .5", {"a": "0.75"}, True),
    ("-5 < a", {"a": "0"}, True),
    ("5 > a", {"a": "4"}, True),
    # two properties are compared as doubles
    ("a > b", {"a": "10", "b": "9.5"}, True),
    ("a < b", {"a": "2", "b": "10"}, True),  # numerically, not as text
    ("a = b", {"a": "x", "b": "x"}, True),
    # booleans
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("a = FALSE", {"a": "no"}, True),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, False),
    # BETWEEN / NOT BETWEEN (bounds included)
    ("a BETWEEN 1 AND 3", {"a": "1"}, True),
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a BETWEEN 1 AND 3", {"a": "4"}, False),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
    ("a BETWEEN 1.5 AND 2.5", {"a": "2"}, True),
    # IN / NOT IN
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {"a": "z"}, False),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x', 'y')", {"a": "x"}, False),
    # IS NULL / IS NOT NULL
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a IS NOT NULL", {}, False),
    # AND / OR / NOT, parentheses, keywords in any case
    ("a = '1' AND b = '2'", {"a": "1", "b": "2"}, True),
    ("a = '1' AND b = '2'", {"a": "1", "b": "3"}, False),
    ("a = '1' OR b = '2'", {"a": "0", "b": "2"}, True),
    ("a = '1' or b = '2' and c = '3'", {"a": "1"}, True),  # AND binds tighter than OR
    ("(a = '1' or b = '2') and c = '3'", {"a": "1"}, False),
    ("NOT (a = '1')", {"a": "2"}, True),
    ("not (a = '1')", {"a": "1"}, False),
    ("a between 1 and 3 AnD b iS nOt NuLl", {"a": "2", "b": ""}, True),
    # comments
    ("a = 1 /* one */ -- done\n", {"a": "1"}, True),
    ("a = --5", {"a": "5"}, True),  # no line break: two minus signs, not a comment
]


@pytest.mark.parametrize(("expression", "props", "expected"), OPERATOR_CASES)
def test_each_operator_matches_as_rocketmq_does(
    expression: str, props: dict[str, str], expected: bool
) -> None:
    assert compile_sql92(expression).matches(props) is expected


NULL_CASES = [
    # a missing property is null; a comparison with null is null, and null never matches ...
    ("a = 'x'", {}, False),
    ("NOT (a = 'x')", {}, False),
    ("a <> 'x'", {}, False),
    ("a > 1", {}, False),
    ("NOT (a > 1)", {}, False),
    ("a BETWEEN 1 AND 2", {}, False),
    ("a NOT BETWEEN 1 AND 2", {}, False),
    ("a IN ('x')", {}, False),
    ("a NOT IN ('x')", {}, False),
    ("a > b", {"a": "1"}, False),
    # ... three-valued logic: null AND false is false, null OR true is true
    ("NOT (a = 'x' AND b = 'y')", {"b": "z"}, True),
    ("a = 'x' OR b = 'y'", {"b": "y"}, True),
    ("NOT (a = 'x' OR b = 'y')", {"b": "z"}, False),
    ("(a = 'x') IS NULL", {}, True),
    ("(a = 'x' AND b = 'y') IS NULL", {"b": "y"}, True),
    # RocketMQ's exceptions: null = null is TRUE, and only a null LEFT side of = yields null
    ("a = b", {}, True),
    ("'x' <> a", {}, True),
    ("'x' = a", {}, False),
    ("NOT ('x' = a)", {}, True),
    # a bare property is a condition that is null when missing and FALSE otherwise
    ("a", {"a": "true"}, False),
    ("NOT a", {"a": "x"}, True),
    ("NOT a", {}, False),
]


@pytest.mark.parametrize(("expression", "props", "expected"), NULL_CASES)
def test_null_semantics(expression: str, props: dict[str, str], expected: bool) -> None:
    assert compile_sql92(expression).matches(props) is expected


ROCKETMQ_QUIRK_CASES = [
    # A failed conversion is an evaluation error: no match, whatever the other branches say.
    ("a > 5", {"a": "5.5"}, False),
    ("a > 5 OR TRUE", {"a": "abc"}, False),
    ("TRUE OR a > 5", {"a": "abc"}, True),  # the right side is never evaluated
    ("NOT (a = 5)", {"a": "3000000000"}, False),  # Integer.valueOf overflows
    ("NOT (a = 5000000000)", {"a": "3000000000"}, True),  # a Long literal converts with Long.valueOf
    ("a = 1", {"a": " 1"}, False),  # Integer.valueOf does not trim
    ("a = 10", {"a": "1_0"}, False),  # nor read Python's underscores
    ("a = 10.0", {"a": "1_0"}, False),
    ("a > b", {"a": "2", "b": "x"}, False),
    ("TRUE = a", {"a": "true"}, False),  # RocketMQ casts the Boolean to a String: error
    # Java's double order: NaN is above everything
    ("a > 5.0", {"a": "NaN"}, True),
    ("a < 5.0", {"a": "NaN"}, False),
    ("a > 1E300", {"a": "Infinity"}, True),
    # unary NOT binds tighter than =, so this compares a Boolean with 1
    ("NOT a = 1", {"a": "2"}, False),
    # Unicode decimal digits convert, as Java's Character.digit reads them
    ("a = 3", {"a": "\u0663"}, True),
]


@pytest.mark.parametrize(("expression", "props", "expected"), ROCKETMQ_QUIRK_CASES)
def test_rocketmq_quirks_are_kept(expression: str, props: dict[str, str], expected: bool) -> None:
    assert compile_sql92(expression).matches(props) is expected


def test_filter_keeps_its_expression_text() -> None:
    flt = compile_sql92("TAGS = 'a'")
    assert isinstance(flt, Sql92Filter)
    assert flt.expression == "TAGS = 'a'"
    assert "TAGS = 'a'" in repr(flt)


# --- refusals: one error class, with position and what was expected -------------------------------

ERROR_CASES = [
    ("", 0, "a condition"),
    ("   ", 0, "a condition"),
    ("a = ", 4, "a property name, a literal or '('"),
    ("a == 1", 3, "a property name, a literal or '('"),
    ("a != 1", 2, "a property name, a literal"),
    ("a = 1 b", 6, "AND, OR"),
    ("(a = 1", 6, "')'"),
    ("a = 'x", 4, "closing single quote"),
    ("a = 1 /* x", 6, "*/"),
    ("a = 1 --", 6, "AND, OR"),  # no line break: two minus signs, and there is no subtraction
    ("a IS 5", 5, "NULL or NOT NULL"),
    ("a IS NOT 5", 9, "NULL"),
    ("a IN (1)", 6, "a string literal"),
    ("a IN ('x' 'y')", 10, "',' or ')'"),
    ("a IN ()", 6, "a string literal"),
    ("5 IN ('x')", 2, "a property name"),
    ("a BETWEEN 1 OR 2", 12, "AND"),
    ("a BETWEEN 3 AND 1", 10, "the lower bound first"),
    ("a BETWEEN NULL AND 1", 10, "a number"),
    ("a BETWEEN 'x' AND 'y'", 10, "a number or a property"),
    ("a > 'x'", 4, "a number or a property"),
    ("a > TRUE", 4, "a number or a property"),
    ("a > 1 > 2", 0, "a number or a property"),
    ("a = NULL", 4, "IS NULL or IS NOT NULL"),
    ("NULL <> a", 0, "IS NULL or IS NOT NULL"),
    ("TRUE = 'x'", 7, "TRUE, FALSE, a property or a condition"),
    ("5", 0, "a comparison"),
    ("'x'", 0, "a comparison"),
    ("-a", 0, "a comparison"),
    ("NOT 5", 4, "a comparison"),
    ("a = 1 AND 5", 10, "a comparison"),
    ("a = 0.0", 4, "a decimal between"),  # RocketMQ refuses decimals below Double.MIN_VALUE
    ("a = 1e999", 4, "a decimal between"),
    ("a = 9223372036854775808", 4, "an integer up to 9223372036854775807"),
    ("a = 007", 5, "AND, OR"),
    ("a = 0L", 5, "AND, OR"),
    ("a LIKE 'x'", 2, "AND, OR"),  # not in RocketMQ 4.9's grammar
    ("a CONTAINS 'x'", 2, "AND, OR"),  # RocketMQ 5.x only
    ("a.b = 1", 1, "a property name, a literal, an operator or a keyword"),
    ("and = 1", 0, "a property name, a literal or '('"),  # keywords are not property names
    ("(" * 100 + "a = 1" + ")" * 100, MAX_DEPTH, f"at most {MAX_DEPTH} levels"),
    ("NOT " * 100 + "a", 4 * MAX_DEPTH, f"at most {MAX_DEPTH} levels"),
]


@pytest.mark.parametrize(("expression", "position", "expected"), ERROR_CASES)
def test_bad_expressions_raise_sql92error_with_position_and_expectation(
    expression: str, position: int, expected: str
) -> None:
    with pytest.raises(Sql92Error) as caught:
        compile_sql92(expression)
    error = caught.value
    assert isinstance(error, CometMQError)
    assert error.position == position, str(error)
    assert expected in error.expected, str(error)
    assert f"at position {position}" in str(error)


def test_long_comparison_chains_are_refused_not_overflowing_the_stack() -> None:
    with pytest.raises(Sql92Error, match="nests too deeply"):
        compile_sql92("a = 1" + " = 1" * 200)


def test_long_and_chains_compile_and_evaluate_flat() -> None:
    names = [f"p{i}" for i in range(3000)]
    flt = compile_sql92(" AND ".join(f"{name} = '1'" for name in names))
    assert flt.matches(dict.fromkeys(names, "1"))
    assert not flt.matches({**dict.fromkeys(names, "1"), "p2999": "0"})


# --- arbitrary input ------------------------------------------------------------------------------

FRAGMENTS = [
    "a", "b", "TAGS", "$x", "_y", "=", "<>", "<", "<=", ">", ">=", "(", ")", ",", "+", "-",
    "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "and", "Not",
    "0", "1", "5L", "2147483648", "9223372036854775807", "9223372036854775808", "1.5", ".5", "5.",
    "1E3", "0.0", "1e999", "'x'", "''", "'it''s'", "'", "--", "\n", "/*", "*/", "!", ".", "*",
]  # fmt: skip


def _never_crashes(text: str) -> None:
    try:
        flt = compile_sql92(text)
    except Sql92Error as error:
        assert 0 <= error.position <= len(text)
        assert error.expected
        return
    for props in ({}, {"a": "1", "b": "x", "TAGS": "t"}, {"a": "NaN", "b": "", "$x": "true"}):
        assert flt.matches(props) in (True, False)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_text_parses_or_raises_sql92error(text: str) -> None:
    _never_crashes(text)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=25).map(" ".join))
def test_token_soup_parses_or_raises_sql92error(text: str) -> None:
    _never_crashes(text)


# --- generated valid expressions against a reference evaluator ------------------------------------
# Java values are (type, value) pairs: ("String", s), ("Integer", n), ("Long", n), ("Double", f),
# ("Boolean", b); None is null. A JavaError stands for any exception RocketMQ's evaluator throws.


class JavaError(Exception):
    pass


def java_parse_integral(text: str, bits: int) -> int:
    if not re.fullmatch(r"[+-]?\d+", text):  # \d: Unicode decimal digits, as Character.digit
        raise JavaError(text)
    number = int(text)
    if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        raise JavaError(text)
    return number


def java_parse_double(text: str) -> float:
    text = text.strip("".join(chr(c) for c in range(33)))
    m = re.fullmatch(r"([+-]?)(NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[fFdD]?", text, re.ASCII)
    if not m:
        raise JavaError(text)
    sign = -1.0 if m.group(1) == "-" else 1.0
    body = m.group(2)
    if body == "NaN":
        return math.nan
    return sign * (math.inf if body == "Infinity" else float(body))


def java_compare_to(a: object, b: object) -> int:
    if isinstance(a, float):
        assert isinstance(b, float)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) - math.isnan(b)
        if a == b == 0.0:
            return (math.copysign(1, a) > math.copysign(1, b)) - (math.copysign(1, a) < math.copysign(1, b))
    return (a > b) - (a < b)  # type: ignore[operator]


NUMERIC_RANK = {"Integer": 0, "Long": 1, "Double": 2}


def java_compare(lv: tuple[str, object], rv: tuple[str, object]) -> int:
    """ComparisonExpression.__compare with string conversion on."""
    (lt, lx), (rt, rx) = lv, rv
    if lt == rt:
        return java_compare_to(lx, rx)
    if lt == "Boolean":
        if rt == "String":
            raise JavaError("ClassCastException")
        return -1
    if lt in NUMERIC_RANK and rt in NUMERIC_RANK:
        if "Double" in (lt, rt):
            return java_compare_to(float(lx), float(rx))  # type: ignore[arg-type]
        return java_compare_to(lx, rx)
    if lt in NUMERIC_RANK and rt == "String":
        return java_compare((lt, lx), (lt, to_java(lt, str(rx))))
    if lt == "String":
        if rt == "Boolean":
            return java_compare_to(str(lx).lower() == "true", rx)
        if rt in NUMERIC_RANK:
            return java_compare((rt, to_java(rt, str(lx))), (rt, rx))
    return -1


def to_java(kind: str, text: str) -> object:
    if kind == "Integer":
        return java_parse_integral(text, 32)
    if kind == "Long":
        return java_parse_integral(text, 64)
    return java_parse_double(text)


@dataclass(frozen=True)
class Prop:
    name: str


@dataclass(frozen=True)
class Lit:
    value: tuple[str, object] | None
    text: str


@dataclass(frozen=True)
class Neg:
    operand: object


@dataclass(frozen=True)
class Binary:
    op: str  # = <> < <= > >= AND OR
    left: object
    right: object


@dataclass(frozen=True)
class Unary:
    op: str  # NOT, ISNULL, ISNOTNULL
    operand: object


@dataclass(frozen=True)
class Between:
    negated: bool
    value: object
    low: object
    high: object


@dataclass(frozen=True)
class In:
    negated: bool
    name: str
    items: tuple[str, ...]


def render(node: object) -> str:
    if isinstance(node, Prop):
        return node.name
    if isinstance(node, Lit):
        return node.text
    if isinstance(node, Neg):
        return f"-{render(node.operand)}"
    if isinstance(node, Binary):
        if node.op in ("AND", "OR", "=", "<>"):
            return f"({render(node.left)}) {node.op} ({render(node.right)})"
        return f"{render(node.left)} {node.op} {render(node.right)}"
    if isinstance(node, Unary):
        if node.op == "NOT":
            return f"NOT ({render(node.operand)})"
        return f"({render(node.operand)}) IS {'NOT ' if node.op == 'ISNOTNULL' else ''}NULL"
    if isinstance(node, Between):
        word = "NOT BETWEEN" if node.negated else "BETWEEN"
        return f"{render(node.value)} {word} {render(node.low)} AND {render(node.high)}"
    if isinstance(node, In):
        items = ", ".join("'" + item.replace("'", "''") + "'" for item in node.items)
        return f"{node.name} {'NOT IN' if node.negated else 'IN'} ({items})"
    raise AssertionError(node)


def reference_eval(node: object, props: dict[str, str]) -> object:
    """Java value, True/False/None for conditions; raises JavaError."""
    if isinstance(node, Prop):
        value = props.get(node.name)
        return None if value is None else ("String", value)
    if isinstance(node, Lit):
        if node.value is not None and node.value[0] == "Boolean":
            return node.value[1]  # TRUE / FALSE are conditions as well as values
        return node.value
    if isinstance(node, Neg):
        inner = reference_eval(node.operand, props)
        if isinstance(inner, tuple) and inner[0] in NUMERIC_RANK:
            return (inner[0], -inner[1])  # type: ignore[operator]
        return None
    if isinstance(node, Binary) and node.op in ("AND", "OR"):
        stop = node.op == "OR"
        left = as_condition(node.left, props)
        if left is stop:
            return stop
        right = as_condition(node.right, props)
        if right is stop:
            return stop
        return None if left is None or right is None else not stop
    if isinstance(node, Unary) and node.op == "NOT":
        inner = as_condition(node.operand, props)
        return None if inner is None else not inner
    if isinstance(node, Unary):
        is_null = reference_eval(node.operand, props) is None
        return is_null if node.op == "ISNULL" else not is_null
    if isinstance(node, Binary) and node.op in ("=", "<>"):
        equal = java_equal(wrap(reference_eval(node.left, props)), wrap(reference_eval(node.right, props)))
        if node.op == "=" or equal is None:
            return equal
        return not equal
    if isinstance(node, Binary):
        lv = wrap(reference_eval(node.left, props))
        if lv is None:
            return None
        rv = wrap(reference_eval(node.right, props))
        if rv is None:
            return None
        if lv[0] == rv[0] == "String":
            sign = java_compare_to(java_parse_double(str(lv[1])), java_parse_double(str(rv[1])))
        else:
            sign = java_compare(lv, rv)
        return {"<": sign < 0, "<=": sign <= 0, ">": sign > 0, ">=": sign >= 0}[node.op]
    if isinstance(node, Between):
        if node.negated:
            both = Binary("OR", Binary("<", node.value, node.low), Binary(">", node.value, node.high))
        else:
            both = Binary("AND", Binary(">=", node.value, node.low), Binary("<=", node.value, node.high))
        return reference_eval(both, props)
    if isinstance(node, In):
        value = props.get(node.name)
        return None if value is None else (value in node.items) != node.negated
    raise AssertionError(node)


def wrap(value: object) -> tuple[str, object] | None:
    if isinstance(value, bool):
        return ("Boolean", value)
    return value  # type: ignore[return-value]


def as_condition(node: object, props: dict[str, str]) -> object:
    value = reference_eval(node, props)
    if isinstance(node, Prop):  # BooleanCast of a property: strings are never TRUE
        return None if value is None else False
    return value


def java_equal(lv: tuple[str, object] | None, rv: tuple[str, object] | None) -> bool | None:
    if lv is None or rv is None:
        if lv is None:
            return True if rv is None else None
        return False
    if lv[0] == rv[0] and lv[0] != "Double" and lv[1] == rv[1]:
        return True
    return java_compare(lv, rv) == 0


NAMES = ["a", "b", "TAGS"]
VALUES = [
    "0", "1", "5", "-3", "+7", "05", "3000000000", "-9223372036854775808", "5.5", "1e3", "-0.0",
    "NaN", "Infinity", " 2 ", "1_0", "\u0663", "abc", "", "x", "it's", "true", "TRUE", "false",
]  # fmt: skip

props_strategy = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=3)
prop_st = st.sampled_from(NAMES).map(Prop)
int_lit = st.integers(0, 2**31 - 1).map(lambda n: Lit(("Integer", n), str(n)))
long_lit = st.integers(2**31, 2**63 - 1).map(lambda n: Lit(("Long", n), str(n)))
small_int_lit = st.sampled_from([0, 1, 2, 3, 5, 7]).map(lambda n: Lit(("Integer", n), str(n)))
double_lit = st.sampled_from([0.5, 1.5, 2.0, 5.5, 1e3, 3e9]).map(lambda f: Lit(("Double", f), repr(f)))
number_lit = st.one_of(small_int_lit, int_lit, long_lit, double_lit)
signed_number = st.one_of(number_lit, number_lit.map(Neg))
string_lit = st.sampled_from(["x", "abc", "", "it's", "true", "5"]).map(
    lambda s: Lit(("String", s), "'" + s.replace("'", "''") + "'")
)
bool_lit = st.sampled_from([True, False]).map(lambda b: Lit(("Boolean", b), str(b).upper()))
ordered_operand = st.one_of(prop_st, signed_number)


def ordered_bounds(pair: tuple[Lit, Lit]) -> bool:
    low, high = pair
    assert low.value is not None and high.value is not None
    return java_compare(high.value, low.value) >= 0


ordered_pairs = st.one_of(
    st.tuples(prop_st, signed_number),
    st.tuples(signed_number, prop_st),
    st.tuples(prop_st, prop_st),
    st.tuples(signed_number, signed_number),
)
leaf_conditions = st.one_of(
    st.builds(lambda op, pair: Binary(op, *pair), st.sampled_from(["<", "<=", ">", ">="]), ordered_pairs),
    st.builds(Binary, st.sampled_from(["=", "<>"]), prop_st, st.one_of(signed_number, string_lit, bool_lit)),
    st.builds(Binary, st.sampled_from(["=", "<>"]), st.one_of(number_lit, string_lit, bool_lit), prop_st),
    st.builds(Binary, st.sampled_from(["=", "<>"]), prop_st, prop_st),
    st.builds(
        lambda value, bounds: Between(False, value, *bounds),
        ordered_operand,
        st.tuples(number_lit, number_lit).filter(ordered_bounds),
    ),
    st.builds(Between, st.just(True), ordered_operand, signed_number, signed_number),
    st.builds(
        In, st.booleans(), st.sampled_from(NAMES), st.lists(st.sampled_from(VALUES), min_size=1).map(tuple)
    ),
    st.builds(Unary, st.sampled_from(["ISNULL", "ISNOTNULL"]), prop_st),
    bool_lit,
    prop_st,
)

conditions = st.recursive(
    leaf_conditions,
    lambda inner: st.one_of(
        st.builds(Binary, st.sampled_from(["AND", "OR", "=", "<>"]), inner, inner),
        st.builds(Unary, st.sampled_from(["NOT", "ISNULL", "ISNOTNULL"]), inner),
    ),
    max_leaves=8,
)


# Every generated expression is also evaluated against this bank: each value in property a, with
# others in b and TAGS, and nothing at all.
PROPS_BANK = (
    [{}]
    + [
        {"a": value, "b": VALUES[(i * 7 + 3) % len(VALUES)], "TAGS": VALUES[(i * 5 + 1) % len(VALUES)]}
        for i, value in enumerate(VALUES)
    ]
    + [{"b": value} for value in VALUES]
)


def outcome(node: object, props: dict[str, str]) -> str:
    try:
        value = as_condition(node, props)
    except JavaError:
        return "error"
    return {True: "true", False: "false", None: "null"}[value]  # type: ignore[index]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conditions, props_strategy)
def test_generated_expressions_agree_with_the_reference_evaluator(
    node: object, props: dict[str, str]
) -> None:
    text = render(node)
    # TRUE, FALSE, null and an evaluation error are told apart by three filters over the same text.
    filters = (compile_sql92(text), compile_sql92(f"NOT ({text})"), compile_sql92(f"({text}) IS NULL"))
    wanted_by_outcome = {
        "true": (True, False, False),
        "false": (False, True, False),
        "null": (False, False, True),
        "error": (False, False, False),
    }
    for message_props in (props, *PROPS_BANK):
        expected = outcome(node, message_props)
        observed = tuple(flt.matches(message_props) for flt in filters)
        assert observed == wanted_by_outcome[expected], (text, message_props, expected)
