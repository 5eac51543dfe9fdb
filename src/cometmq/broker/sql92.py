"""RocketMQ's SQL92 message filter: parse an expression once, evaluate it per message.

Pure: no I/O. :func:`compile_sql92` turns an expression into a :class:`Sql92Filter` whose ``matches``
takes a message's properties (``dict[str, str]``, ``TAGS`` among them) and says whether the message is
delivered. Any bad input raises :class:`Sql92Error` (a ``ValueError``) naming the position and what
was expected there.

The grammar and the semantics are those of RocketMQ 4.9.x's filter module (``filter/parser/
SelectorParser.jj``, ``filter/expression/*``), quirks included, so a consumer gets the same messages
from CometMQ as from a RocketMQ broker (docs/filters.md lists them for users):

* Keywords (``AND OR NOT BETWEEN IN IS NULL TRUE FALSE``) are case-insensitive; property names are
  case-sensitive ASCII identifiers ``[A-Za-z_$][A-Za-z0-9_$]*``. Comments: ``/* */`` and ``--`` up to a
  line break (a ``--`` not followed by a line break is two minus signs).
* Literals: ``'text'`` (``''`` is a quote), integers (``0`` or no leading zero, optional ``L``; up to
  2^63-1, Java ``Integer`` when it fits 32 bits, else ``Long``), decimals (``1.5``, ``.5``, ``5.``,
  ``1E3``; a Java ``Double`` that must lie between 4.9E-324 and 1.7976931348623157E308, so ``0.0`` is
  refused, as in RocketMQ), ``TRUE``, ``FALSE``, ``NULL``. No arithmetic; unary ``+``/``-`` only.
* Precedence, loosest first: ``OR``; ``AND``; ``=  <>  IS [NOT] NULL``; ``<  <=  >  >=  [NOT] BETWEEN
  [NOT] IN``; unary ``+ - NOT``. Unary ``NOT`` binds tightest, so ``NOT a = 1`` is ``(NOT a) = 1``.
* Values are three-valued: a missing property is null, and a comparison with null is null (not
  true); ``AND``/``OR``/``NOT`` follow SQL's three-valued logic; a message matches only on TRUE.
  Exceptions copied from RocketMQ: ``a = b`` is TRUE when both are missing, and ``'x' <> a`` is TRUE
  when ``a`` is missing (only a null *left* operand of ``=`` yields null).
* Properties are strings. Against a number they are converted with Java's rules for the number's
  type (``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf``); against ``TRUE``/``FALSE`` with
  ``Boolean.valueOf``. ``<``, ``<=``, ``>``, ``>=`` between two properties compare them as doubles.
  A conversion that fails (``'5.5'`` against the integer ``5``, ``'abc'`` against any number) is an
  evaluation error: RocketMQ then drops the whole expression's result, so the message does not match
  even if another ``OR`` branch would have been true. Java's double ordering is kept: NaN is greater
  than everything.
* Compile-time refusals as RocketMQ's: ``<``/``BETWEEN`` with a non-number literal (``a > 'x'``),
  ``= NULL`` (use ``IS NULL``), ``TRUE = 'x'``, ``BETWEEN`` with a larger lower bound, ``IN`` on a
  non-property or with non-string items, an expression that is not a condition (``5``).

How the filter is fast: the parse tree is compiled once into nested closures, each specialised for
the operand kinds it found (property against constant is the common case, so that pair gets closures
that do one dict lookup and one conversion), and ``AND``/``OR`` chains are flattened into one closure.
``bench/sql92.py`` measures a match; on pull, decoding a message's properties costs more than
evaluating the filter on them.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from cometmq.errors import Sql92Error

__all__ = ["Sql92Filter", "compile_sql92"]


# Tokens --------------------------------------------------------------------------------------------

_TOKEN_RE: Final = re.compile(
    r"""
    (?P<ws>[ \t\n\r\f]+)
  | (?P<comment>--[^\n\r]*(?:\r\n|\n|\r) | /\*(?:[^*]|\*+[^*/])*\*+/)
  | (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)? | \.[0-9]+(?:[eE][+-]?[0-9]+)? | [0-9]+[eE][+-]?[0-9]+)
  | (?P<int>0|[1-9][0-9]*[lL]?)
  | (?P<str>'(?:''|[^'])*')
  | (?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|<=|>=|[=<>(),+-])
    """,
    re.VERBOSE,
)
_KEYWORDS: Final = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
_INT_MAX: Final = 2**31 - 1
_LONG_MAX: Final = 2**63 - 1
_DOUBLE_MIN: Final = 5e-324  # Java's Double.MIN_VALUE: the smallest positive (subnormal) double
# Parentheses and unary operators nest at most this deep, and so does the compiled tree, which keeps
# parsing, compiling and evaluating far from Python's recursion limit.
MAX_DEPTH: Final = 64


class _Long(int):
    """An integer literal outside 32 bits: Java ``Long``, converted with ``Long.valueOf``."""

    __slots__ = ()


class _Token(NamedTuple):
    kind: str  # "kw", "id", "int", "float", "str", "op", "end"
    value: object  # keyword (upper case), name, number, decoded string, operator
    start: int
    end: int


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    size = len(text)
    match = _TOKEN_RE.match
    while pos < size:
        m = match(text, pos)
        if m is None:
            if text[pos] == "'":
                raise Sql92Error("unterminated string literal", pos, "a closing single quote")
            if text.startswith("/*", pos):
                raise Sql92Error("unterminated /* comment", pos, "*/")
            raise Sql92Error(
                f"unexpected character {text[pos]!r}",
                pos,
                "a property name, a literal, an operator or a keyword",
            )
        kind = m.lastgroup
        image = m.group()
        end = m.end()
        if kind == "word":
            upper = image.upper()
            if upper in _KEYWORDS:
                tokens.append(_Token("kw", upper, pos, end))
            else:
                tokens.append(_Token("id", image, pos, end))
        elif kind == "int":
            digits = image.rstrip("lL")
            value = int(digits) if len(digits) <= 19 else _LONG_MAX + 1
            if value > _LONG_MAX:
                raise Sql92Error(
                    f"integer literal {image} is too large", pos, f"an integer up to {_LONG_MAX}"
                )
            tokens.append(_Token("int", value if value <= _INT_MAX else _Long(value), pos, end))
        elif kind == "float":
            number = float(image)
            if not _DOUBLE_MIN <= number <= 1.7976931348623157e308:
                # RocketMQ's ConstantExpression.createFloat refuses these; 0.0 among them.
                raise Sql92Error(
                    f"decimal literal {image} is out of range",
                    pos,
                    "a decimal between 4.9E-324 and 1.7976931348623157E308 (write 0 for zero)",
                )
            tokens.append(_Token("float", number, pos, end))
        elif kind == "str":
            tokens.append(_Token("str", image[1:-1].replace("''", "'"), pos, end))
        elif kind == "op":
            tokens.append(_Token("op", image, pos, end))
        pos = end
    tokens.append(_Token("end", None, size, size))
    return tokens


# Parse tree ----------------------------------------------------------------------------------------
# Node kinds. "const" is a string or number literal, "boolconst" TRUE / FALSE / NULL (RocketMQ's
# BooleanConstantExpression), "neg" a unary minus (never a constant for RocketMQ's checks).
_CONST, _BOOLCONST, _PROP, _NEG = "const", "boolconst", "prop", "neg"
_CMP, _EQ, _NE, _ISNULL, _ISNOTNULL, _IN, _NOTIN = "cmp", "eq", "ne", "isnull", "isnotnull", "in", "notin"
_AND, _OR, _NOT, _CAST = "and", "or", "not", "cast"
_BOOLEAN_KINDS: Final = frozenset(
    {_BOOLCONST, _CMP, _EQ, _NE, _ISNULL, _ISNOTNULL, _IN, _NOTIN, _AND, _OR, _NOT, _CAST}
)


@dataclass(slots=True)
class _Node:
    kind: str
    start: int
    end: int
    children: tuple[_Node, ...] = ()
    value: object = None  # constant value, property name, comparison operator, IN items
    depth: int = 1

    @property
    def is_boolean(self) -> bool:
        return self.kind in _BOOLEAN_KINDS

    @property
    def is_constant(self) -> bool:
        return self.kind == _CONST or self.kind == _BOOLCONST


def _is_number(value: object) -> bool:
    return type(value) in (int, _Long, float)


class _Parser:
    """Recursive descent over SelectorParser.jj's productions, with its semantic checks."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0
        self.nesting = 0

    # token helpers

    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def _peek_kw(self, keyword: str, ahead: int = 0) -> bool:
        tok = self.tokens[min(self.index + ahead, len(self.tokens) - 1)]
        return tok.kind == "kw" and tok.value == keyword

    def _peek_op(self, op: str) -> bool:
        tok = self.token
        return tok.kind == "op" and tok.value == op

    def _advance(self) -> _Token:
        tok = self.tokens[self.index]
        self.index += 1
        return tok

    def _describe(self, tok: _Token) -> str:
        if tok.kind == "end":
            return "end of the expression"
        return repr(self.text[tok.start : tok.end])

    def _fail(self, expected: str) -> Sql92Error:
        tok = self.token
        return Sql92Error(f"unexpected {self._describe(tok)}", tok.start, expected)

    def _expect_kw(self, keyword: str) -> _Token:
        if not self._peek_kw(keyword):
            raise self._fail(keyword)
        return self._advance()

    def _expect_op(self, op: str) -> _Token:
        if not self._peek_op(op):
            raise self._fail(repr(op))
        return self._advance()

    def source(self, node: _Node) -> str:
        return self.text[node.start : node.end]

    def _node(
        self, kind: str, start: int, end: int, children: tuple[_Node, ...], value: object = None
    ) -> _Node:
        depth = 1 + max((child.depth for child in children), default=0)
        if depth > MAX_DEPTH:
            raise Sql92Error(
                "the expression nests too deeply", start, f"at most {MAX_DEPTH} levels of nesting"
            )
        return _Node(kind, start, end, children, value, depth)

    def _enter(self) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise Sql92Error(
                "the expression nests too deeply", self.token.start, f"at most {MAX_DEPTH} levels of nesting"
            )

    # grammar

    def parse(self) -> _Node:
        if self.token.kind == "end":
            raise Sql92Error("the expression is empty", 0, "a condition such as a = 'x'")
        node = self._or()
        if self.token.kind != "end":
            raise self._fail("AND, OR, a comparison (=, <>, <, <=, >, >=, BETWEEN, IN, IS) or the end")
        return self._as_boolean(node)

    def _as_boolean(self, node: _Node) -> _Node:
        """RocketMQ's asBooleanExpression: conditions pass, a bare property is cast, others refused."""
        if node.is_boolean:
            return node
        if node.kind == _PROP:
            return self._node(_CAST, node.start, node.end, (node,))
        raise Sql92Error(
            f"{self.source(node)!r} is not a condition",
            node.start,
            "a comparison, AND/OR/NOT, TRUE/FALSE or a property",
        )

    def _logic(self, kind: str, left: _Node, right: _Node) -> _Node:
        # AND/OR chains become one n-ary node: same result and evaluation order as RocketMQ's
        # left-nested pairs, flat in depth and in calls per message.
        parts: list[_Node] = []
        for side in (self._as_boolean(left), self._as_boolean(right)):
            parts.extend(side.children if side.kind == kind else (side,))
        return self._node(kind, left.start, right.end, tuple(parts))

    def _or(self) -> _Node:
        left = self._and()
        while self._peek_kw("OR"):
            self._advance()
            left = self._logic(_OR, left, self._and())
        return left

    def _and(self) -> _Node:
        left = self._equality()
        while self._peek_kw("AND"):
            self._advance()
            left = self._logic(_AND, left, self._equality())
        return left

    def _equality(self) -> _Node:
        left = self._comparison()
        while True:
            tok = self.token
            if self._peek_op("=") or self._peek_op("<>"):
                self._advance()
                right = self._comparison()
                self._check_equal(left, right, tok)
                left = self._node(_EQ if tok.value == "=" else _NE, left.start, right.end, (left, right))
            elif self._peek_kw("IS"):
                self._advance()
                negated = self._peek_kw("NOT")
                if negated:
                    self._advance()
                if not self._peek_kw("NULL"):
                    raise self._fail("NULL" if negated else "NULL or NOT NULL")
                end = self._advance().end
                left = self._node(_ISNOTNULL if negated else _ISNULL, left.start, end, (left,))
            else:
                return left

    def _comparison(self) -> _Node:
        left = self._unary()
        while True:
            tok = self.token
            if tok.kind == "op" and tok.value in _ORDERINGS:
                self._advance()
                right = self._unary()
                left = self._ordering(str(tok.value), left, right)
            elif self._peek_kw("BETWEEN") or (self._peek_kw("NOT") and self._peek_kw("BETWEEN", 1)):
                negated = self._peek_kw("NOT")
                self.index += 2 if negated else 1
                low = self._unary()
                self._expect_kw("AND")
                high = self._unary()
                left = self._between(left, low, high, negated)
            elif self._peek_kw("IN") or (self._peek_kw("NOT") and self._peek_kw("IN", 1)):
                negated = self._peek_kw("NOT")
                self.index += 2 if negated else 1
                if left.kind != _PROP:
                    raise Sql92Error(
                        f"IN needs a property on its left, not {self.source(left)!r}",
                        tok.start,
                        "a property name",
                    )
                self._expect_op("(")
                items = [self._string_item()]
                while self._peek_op(","):
                    self._advance()
                    items.append(self._string_item())
                if not self._peek_op(")"):
                    raise self._fail("',' or ')'")
                end = self._advance().end
                left = self._node(_NOTIN if negated else _IN, left.start, end, (left,), frozenset(items))
            else:
                return left

    def _string_item(self) -> str:
        tok = self.token
        if tok.kind != "str":
            raise self._fail("a string literal in single quotes (IN lists hold strings only)")
        self._advance()
        return str(tok.value)

    def _unary(self) -> _Node:
        tok = self.token
        if tok.kind == "op" and tok.value in ("+", "-"):
            self._enter()
            self._advance()
            operand = self._unary()
            self.nesting -= 1
            if tok.value == "+":  # RocketMQ drops a unary plus: +5 is the constant 5
                return operand
            return self._node(_NEG, tok.start, operand.end, (operand,))
        if self._peek_kw("NOT"):
            self._enter()
            self._advance()
            operand = self._as_boolean(self._unary())
            self.nesting -= 1
            return self._node(_NOT, tok.start, operand.end, (operand,))
        return self._primary()

    def _primary(self) -> _Node:
        tok = self.token
        kind = tok.kind
        if kind in ("str", "int", "float"):
            self._advance()
            return _Node(_CONST, tok.start, tok.end, (), tok.value)
        if kind == "kw" and tok.value in ("TRUE", "FALSE", "NULL"):
            self._advance()
            value = {"TRUE": True, "FALSE": False, "NULL": None}[str(tok.value)]
            return _Node(_BOOLCONST, tok.start, tok.end, (), value)
        if kind == "id":
            self._advance()
            return _Node(_PROP, tok.start, tok.end, (), tok.value)
        if kind == "op" and tok.value == "(":
            self._enter()
            self._advance()
            inner = self._or()
            self._expect_op(")")
            self.nesting -= 1
            return inner
        raise self._fail("a property name, a literal or '('")

    # RocketMQ's compile-time checks (ComparisonExpression.check*, createBetween)

    def _check_equal(self, left: _Node, right: _Node, op: _Token) -> None:
        for side in (left, right):
            if side.is_constant and side.value is None:
                raise Sql92Error(
                    f"NULL cannot be compared with {op.value!r}", side.start, "IS NULL or IS NOT NULL"
                )
        if left.kind == _BOOLCONST and right.kind == _CONST:
            raise Sql92Error(
                f"{self.source(left)!r} cannot be compared with {self.source(right)!r}",
                right.start,
                "TRUE, FALSE, a property or a condition",
            )

    def _check_ordered(self, node: _Node, op: str) -> None:
        if (node.is_constant and not _is_number(node.value)) or node.is_boolean:
            raise Sql92Error(
                f"{self.source(node)!r} cannot be compared with {op!r}", node.start, "a number or a property"
            )

    def _ordering(self, op: str, left: _Node, right: _Node) -> _Node:
        self._check_ordered(left, op)
        self._check_ordered(right, op)
        return self._node(_CMP, left.start, right.end, (left, right), op)

    def _between(self, value: _Node, low: _Node, high: _Node, negated: bool) -> _Node:
        word = "NOT BETWEEN" if negated else "BETWEEN"
        if not negated and low.is_constant and high.is_constant:
            if low.value is None or high.value is None:
                raise Sql92Error("BETWEEN bounds cannot be NULL", low.start, "a number")
            try:
                reversed_bounds = _java_compare(high.value, low.value) < 0
            except _EvalError:
                reversed_bounds = False  # the operand check below refuses such bounds
            if reversed_bounds:
                raise Sql92Error(
                    f"BETWEEN lower bound {self.source(low)} is greater than upper bound {self.source(high)}",
                    low.start,
                    "the lower bound first",
                )
        for node in (value, low, high):
            self._check_ordered(node, word)
        if negated:  # RocketMQ: value < low OR value > high
            parts = (
                self._node(_CMP, value.start, low.end, (value, low), "<"),
                self._node(_CMP, value.start, high.end, (value, high), ">"),
            )
            return self._node(_OR, value.start, high.end, parts)
        parts = (
            self._node(_CMP, value.start, low.end, (value, low), ">="),
            self._node(_CMP, value.start, high.end, (value, high), "<="),
        )
        return self._node(_AND, value.start, high.end, parts)


_ORDERINGS: Final = frozenset({"<", "<=", ">", ">="})


# Java value semantics ------------------------------------------------------------------------------


class _EvalError(Exception):
    """A Java exception during RocketMQ's evaluation (bad number, ClassCastException): the message
    does not match, whatever the rest of the expression says."""


_JAVA_TRIM: Final = "".join(map(chr, range(33)))  # String.trim() strips every char <= ' '
_JAVA_DOUBLE_RE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_JAVA_HEX_DOUBLE_RE: Final = re.compile(
    r"[+-]?0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?"
)


def _java_integral(text: str, limit: int) -> int:
    """Integer.valueOf / Long.valueOf: optional sign, decimal digits (any script), no blanks."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits.isdecimal():
        raise _EvalError
    try:
        number = int(text)
    except ValueError:  # beyond int()'s digit limit: far out of range anyway
        raise _EvalError from None
    if not -limit - 1 <= number <= limit:
        raise _EvalError
    return number


def _java_int(text: str) -> int:
    if text.isdecimal() and len(text) < 10:  # fast path: plain digits well inside 32 bits
        return int(text)
    return _java_integral(text, _INT_MAX)


def _java_long(text: str) -> int:
    if text.isdecimal() and len(text) < 19:
        return int(text)
    return _java_integral(text, _LONG_MAX)


def _java_double(text: str) -> float:
    """Double.valueOf: trimmed, Java's float syntax (NaN, Infinity, f/d suffix, hex), not Python's."""
    if text.isdigit() and text.isascii():
        return float(text)
    trimmed = text.strip(_JAVA_TRIM)
    if _JAVA_DOUBLE_RE.fullmatch(trimmed):
        body = trimmed.rstrip("fFdD") if trimmed[-1] not in "yN" else trimmed
        return float(body.replace("Infinity", "inf"))
    if _JAVA_HEX_DOUBLE_RE.fullmatch(trimmed):
        return float.fromhex(trimmed.rstrip("fFdD"))
    raise _EvalError


def _double_compare(a: float, b: float) -> int:
    """Double.compare: NaN above everything (and equal to itself), -0.0 below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b:
        if a == 0.0:
            sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
            return (sa > sb) - (sa < sb)
        return 0
    return (a != a) - (b != b)


def _java_compare(lv: Any, rv: Any) -> int:
    """RocketMQ's ComparisonExpression.__compare on non-null values, string conversion on."""
    lc, rc = type(lv), type(rv)
    if lc is not rc:
        if lc is bool:
            if rc is str:
                raise _EvalError  # RocketMQ casts the Boolean to String: ClassCastException
            return -1
        if lc is int or lc is _Long:
            if rc is int or rc is _Long:
                pass
            elif rc is float:
                lv = float(lv)
            elif rc is str:
                rv = _java_int(rv) if lc is int else _java_long(rv)
            else:
                return -1
        elif lc is float:
            if rc is int or rc is _Long:
                rv = float(rv)
            elif rc is str:
                rv = _java_double(rv)
            else:
                return -1
        elif lc is str:
            if rc is bool:
                lv = lv.lower() == "true"
            elif rc is int:
                lv = _java_int(lv)
            elif rc is _Long:
                lv = _java_long(lv)
            elif rc is float:
                lv = _java_double(lv)
            else:
                return -1
        else:
            return -1
    if type(lv) is float or type(rv) is float:
        return _double_compare(float(lv), float(rv))
    return int((lv > rv) - (lv < rv))


def _java_equal(lv: object, rv: object) -> bool | None:
    """RocketMQ's doCreateEqual: only a null *left* side gives null; null = null is TRUE."""
    if lv is None:
        return True if rv is None else None
    if rv is None:
        return False
    if type(lv) is type(rv) and type(lv) is not float:
        return lv == rv
    return _java_compare(lv, rv) == 0


# Compilation to closures ---------------------------------------------------------------------------

_Fn = Callable[[Mapping[str, str]], object]
_NOT_STATIC: Final = object()
# comparison result (-1/0/1) -> truth, per operator
_TESTS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_FLIPPED: Final = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NAN_IS: Final = {"<": False, "<=": False, ">": True, ">=": True}  # NaN is the greatest double


def _static(node: _Node) -> Any:
    """The value of a constant operand (unary minus folded), or _NOT_STATIC."""
    if node.is_constant:
        return node.value
    if node.kind == _NEG:
        inner = _static(node.children[0])
        if inner is _NOT_STATIC:
            return _NOT_STATIC
        if type(inner) is _Long:
            return _Long(-inner)
        if type(inner) in (int, float):
            return -inner
        return None  # RocketMQ negates numbers only; anything else becomes null
    return _NOT_STATIC


def _compile(node: _Node) -> _Fn:
    kind = node.kind
    if kind == _PROP:
        name = str(node.value)

        def prop(p: Mapping[str, str]) -> object:
            return p.get(name)

        return prop
    static = _static(node)
    if static is not _NOT_STATIC:
        return lambda p: static
    if kind == _NEG:  # of a non-constant: a property, a condition or null, never a number
        inner = _compile(node.children[0])

        def neg(p: Mapping[str, str]) -> object:
            inner(p)  # evaluated for its errors only
            return None

        return neg
    if kind == _CAST:  # a bare property as a condition: never TRUE, since properties are strings
        name = str(node.children[0].value)
        return lambda p: None if p.get(name) is None else False
    if kind == _NOT:
        return _negated(_compile(node.children[0]))
    if kind in (_AND, _OR):
        return _compile_logic(kind, node.children)
    if kind == _EQ:
        return _compile_eq(*node.children)
    if kind == _NE:
        left, right = node.children
        if left.kind == _PROP and type(_static(right)) is str:
            name, text = str(left.value), _static(right)
            return lambda p: None if (v := p.get(name)) is None else v != text
        return _negated(_compile_eq(left, right))
    if kind in (_ISNULL, _ISNOTNULL):
        want_null = kind == _ISNULL
        operand = node.children[0]
        if operand.kind == _PROP:
            name = str(operand.value)
            return lambda p: (p.get(name) is None) is want_null
        inner = _compile(operand)
        return lambda p: (inner(p) is None) is want_null
    if kind in (_IN, _NOTIN):
        name = str(node.children[0].value)
        items = node.value
        assert isinstance(items, frozenset)
        negate = kind == _NOTIN
        return lambda p: None if (v := p.get(name)) is None else (v in items) is not negate
    if kind == _CMP:
        return _compile_ordering(str(node.value), *node.children)
    raise AssertionError(f"unknown node kind {kind}")  # pragma: no cover


def _negated(inner: _Fn) -> _Fn:
    def negated(p: Mapping[str, str]) -> object:
        value = inner(p)
        return None if value is None else not value

    return negated


def _compile_logic(kind: str, children: tuple[_Node, ...]) -> _Fn:
    fns = tuple(_compile(child) for child in children)
    decisive = kind == _OR  # OR stops at the first TRUE, AND at the first FALSE
    if len(fns) == 2:
        first, second = fns

        def pair(p: Mapping[str, str]) -> object:
            a = first(p)
            if a is decisive:
                return decisive
            b = second(p)
            if b is decisive:
                return decisive
            return None if a is None or b is None else not decisive

        return pair

    def chain(p: Mapping[str, str]) -> object:
        unknown = False
        for fn in fns:
            value = fn(p)
            if value is decisive:
                return decisive
            if value is None:
                unknown = True
        return None if unknown else not decisive

    return chain


def _property_against(
    name: str, constant: object, kind: str, op: str = "", missing: object = None
) -> _Fn | None:
    """Closure for ``property <op> constant`` (``=`` when *op* is empty); None for other pairs.
    *missing* is the result of ``=`` for an absent property: null, but FALSE with the constant on the
    left (RocketMQ's doCreateEqual)."""
    tc = type(constant)
    if kind == "eq":
        if tc is str:
            return lambda p: missing if (v := p.get(name)) is None else v == constant
        if tc is bool:
            return lambda p: missing if (v := p.get(name)) is None else (v.lower() == "true") is constant
        if tc is int:
            return lambda p: missing if (v := p.get(name)) is None else _java_int(v) == constant
        if tc is _Long:
            return lambda p: missing if (v := p.get(name)) is None else _java_long(v) == constant
        if tc is float:  # never NaN or zero, so float equality is Double.compare's
            return lambda p: missing if (v := p.get(name)) is None else _java_double(v) == constant
        return None
    test = _TESTS[op]
    if tc is int or tc is _Long:
        convert = _java_int if tc is int else _java_long
        return lambda p: None if (v := p.get(name)) is None else test(convert(v), constant)
    if tc is float:
        nan_is = _NAN_IS[op]

        def double_cmp(p: Mapping[str, str]) -> object:
            v = p.get(name)
            if v is None:
                return None
            x = _java_double(v)
            return nan_is if x != x else test(x, constant)

        return double_cmp
    if constant is None:
        return lambda p: None
    return None


def _compile_eq(left: _Node, right: _Node) -> _Fn:
    lstatic, rstatic = _static(left), _static(right)
    fast: _Fn | None = None
    if left.kind == _PROP and rstatic is not _NOT_STATIC and rstatic is not None:
        fast = _property_against(str(left.value), rstatic, "eq")
    elif right.kind == _PROP and lstatic is not _NOT_STATIC and lstatic is not None:
        if type(lstatic) is bool:  # RocketMQ casts the Boolean to String: ClassCastException
            name = str(right.value)

            def bool_first(p: Mapping[str, str]) -> object:
                if p.get(name) is None:
                    return False
                raise _EvalError

            return bool_first
        fast = _property_against(str(right.value), lstatic, "eq", missing=False)
    if fast is not None:
        return fast
    lf, rf = _compile(left), _compile(right)
    return lambda p: _java_equal(lf(p), rf(p))


def _compile_ordering(op: str, left: _Node, right: _Node) -> _Fn:
    lstatic, rstatic = _static(left), _static(right)
    fast: _Fn | None = None
    if left.kind == _PROP and rstatic is not _NOT_STATIC:
        fast = _property_against(str(left.value), rstatic, "cmp", op)
    elif right.kind == _PROP and lstatic is not _NOT_STATIC:
        fast = _property_against(str(right.value), lstatic, "cmp", _FLIPPED[op])
    if fast is not None:
        return fast
    lf, rf = _compile(left), _compile(right)
    sign_test = _TESTS[op]

    def ordering(p: Mapping[str, str]) -> object:
        lv = lf(p)
        if lv is None:
            return None
        rv = rf(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:  # RocketMQ compares two strings as doubles
            return sign_test(_double_compare(_java_double(lv), _java_double(rv)), 0)
        return sign_test(_java_compare(lv, rv), 0)

    return ordering


class Sql92Filter:
    """A compiled SQL92 expression. ``matches(properties)`` is safe to call from any thread."""

    __slots__ = ("_root", "expression")

    def __init__(self, expression: str, root: _Fn) -> None:
        self.expression = expression
        self._root = root

    def matches(self, properties: Mapping[str, str]) -> bool:
        """True when the expression is TRUE for a message with these properties; null (unknown)
        and evaluation errors mean no match, as in RocketMQ."""
        try:
            return self._root(properties) is True
        except _EvalError:
            return False

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"


def compile_sql92(expression: str) -> Sql92Filter:
    """Parse and compile *expression*; raises :class:`Sql92Error` when RocketMQ would refuse it."""
    parser = _Parser(expression)
    return Sql92Filter(expression, _compile(parser.parse()))
