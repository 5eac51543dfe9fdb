"""The blocking facade's declarations for type checkers (cometmq.client.blocking, the ``if TYPE_CHECKING:``
block of each class) against the asyncio clients it forwards to, and mypy on a sample that uses them.

At run time the facade forwards every public attribute generically, so only its declarations can fall
out of step with the asyncio classes: a method added, removed or given other parameters there must be
declared here too, with the blocking return type (``async def f() -> T`` is ``def f() -> T``, an async
generator's ``AsyncIterator[T]`` an ``Iterator[T]``). Annotations are compared as source text
(``from __future__ import annotations`` on both sides), defaults only by presence."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api

from cometmq.client import blocking

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = Path(__file__).with_name("typing_samples") / "blocking_usage.py"
CLASSES = [
    blocking.Producer,
    blocking.PushConsumer,
    blocking.LitePullConsumer,
    blocking.SimpleConsumer,
    blocking.AdminClient,
]

# Public members of the asyncio clients the facade declares nothing for. (What a blocking class
# defines for real -- close, closed, aio, Producer.send and send_batch -- needs no entry here: real
# methods of the class itself are compared with their asyncio counterparts, _BlockingClient's own
# are the facade's.)
NOT_DECLARED = {
    "consumer_data": "hook the client instance calls for heartbeats",
    "on_ids_changed": "hook the client instance calls when a broker says the group changed",
    "on_reset_offsets": "hook the client instance calls when an administrator resets offsets",
    "running_info": "hook the client instance calls when a broker asks for running info",
    "instance": "the asyncio ClientInstance, usable on the loop thread only (as aio is)",
}


class _Source:
    """Source text that ``inspect.Signature`` shows as it is (for messages)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Shape:
    """What a declaration must match: parameters as (name, kind, has a default, annotation)."""

    params: tuple[tuple[str, str, bool, str | None], ...]
    returns: str | None
    is_property: bool = False

    def __str__(self) -> str:
        params = [
            inspect.Parameter(
                name,
                getattr(inspect.Parameter, kind),
                default=_Source("...") if has_default else inspect.Parameter.empty,
                annotation=inspect.Parameter.empty if annotation is None else _Source(annotation),
            )
            for name, kind, has_default, annotation in self.params
        ]
        return ("@property " if self.is_property else "") + f"{inspect.Signature(params)} -> {self.returns}"


def normalized(annotation: object) -> str:
    assert isinstance(annotation, str), f"{annotation!r}: expected the source text (postponed annotations)"
    return ast.unparse(ast.parse(annotation, mode="eval"))


def shape_of(member: Any) -> Shape:
    """The shape of a function or property object (annotations are the strings of the source)."""
    is_property = isinstance(member, property)
    signature = inspect.signature(member.fget if is_property else member)
    params = tuple(
        (
            p.name,
            p.kind.name,
            p.default is not inspect.Parameter.empty,
            None if p.annotation is inspect.Parameter.empty else normalized(p.annotation),
        )
        for p in signature.parameters.values()
    )
    returns = signature.return_annotation
    return Shape(params, None if returns is inspect.Signature.empty else normalized(returns), is_property)


def shape_of_declaration(fn: ast.FunctionDef) -> Shape:
    def annotation(node: ast.expr | None) -> str | None:
        return None if node is None else ast.unparse(node)

    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    params = [
        (
            arg.arg,
            "POSITIONAL_ONLY" if i < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD",
            i >= first_default,
            annotation(arg.annotation),
        )
        for i, arg in enumerate(positional)
    ]
    if args.vararg:
        params.append((args.vararg.arg, "VAR_POSITIONAL", False, annotation(args.vararg.annotation)))
    params += [
        (arg.arg, "KEYWORD_ONLY", default is not None, annotation(arg.annotation))
        for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if args.kwarg:
        params.append((args.kwarg.arg, "VAR_KEYWORD", False, annotation(args.kwarg.annotation)))
    decorators = [ast.unparse(d) for d in fn.decorator_list]
    assert decorators in ([], ["property"]), f"{fn.name}: unexpected decorators {decorators}"
    return Shape(tuple(params), annotation(fn.returns), decorators == ["property"])


def declarations() -> dict[str, dict[str, Shape]]:
    """Each blocking class's declarations under ``if TYPE_CHECKING:``, by class and member name."""
    module = ast.parse(Path(blocking.__file__).read_text())
    found: dict[str, dict[str, Shape]] = {}
    for cls in module.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        members = found.setdefault(cls.name, {})
        for block in cls.body:
            if not (isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"):
                continue
            for node in block.body:
                assert not isinstance(node, ast.AsyncFunctionDef), (
                    f"{cls.name}.{node.name}: declare it blocking"
                )
                if isinstance(node, ast.FunctionDef):
                    assert node.name not in members, f"{cls.name}.{node.name} declared twice"
                    members[node.name] = shape_of_declaration(node)
    return found


def blocking_return(annotation: str | None) -> str:
    """An async generator's return annotation as the facade's iterator."""
    node = ast.parse(annotation, mode="eval").body if annotation else None
    assert (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("AsyncIterator", "AsyncGenerator")
    ), f"async generator annotated {annotation!r}: expected AsyncIterator[...] or AsyncGenerator[...]"
    item = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
    return f"Iterator[{ast.unparse(item)}]"


def asyncio_class(cls: type[blocking._BlockingClient]) -> type:
    module_name, _, name = cls._target.partition(":")
    target: type = getattr(importlib.import_module(module_name), name)
    return target


def expected_declarations(cls: type[blocking._BlockingClient]) -> tuple[dict[str, Shape], dict[str, Shape]]:
    """What ``cls`` should declare for its asyncio client, and the real methods of ``cls`` that stand
    in for asyncio ones (which must take the same parameters)."""
    target = asyncio_class(cls)
    declared: dict[str, Shape] = {"__init__": shape_of(target.__init__)}
    real: dict[str, Shape] = {}
    for member_name, member in inspect.getmembers_static(target):
        if member_name == "__anext__":  # ``for message in client`` iterates what ``async for`` would
            item = shape_of(member).returns
            declared["__iter__"] = Shape(
                (("self", "POSITIONAL_OR_KEYWORD", False, None),), f"Iterator[{item}]"
            )
        if member_name.startswith("_") or member_name in NOT_DECLARED:
            continue
        if not (isinstance(member, property) or inspect.isfunction(member)):
            continue  # data attributes: read through __getattr__, as Any for type checkers
        shape = shape_of(member)
        if inspect.isasyncgenfunction(member):
            shape = Shape(shape.params, blocking_return(shape.returns))
        if member_name in vars(cls):
            real[member_name] = shape
        elif not hasattr(blocking._BlockingClient, member_name):
            declared[member_name] = shape
    return declared, real


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_type_checking_declarations_follow_the_asyncio_client(cls: type[blocking._BlockingClient]) -> None:
    expected, real = expected_declarations(cls)
    declared = declarations()[cls.__name__]
    problems = [
        f"{cls.__name__}.{name}: asyncio client has {shape}, facade declares {declared.get(name, 'nothing')}"
        for name, shape in expected.items()
        if declared.get(name) != shape
    ]
    problems += [
        f"{cls.__name__}.{name}: declared, but the asyncio client has no such public member"
        for name in declared.keys() - expected.keys()
    ]
    problems += [
        f"{cls.__name__}.{name}: asyncio client has {shape}, the facade defines {shape_of(vars(cls)[name])}"
        for name, shape in real.items()
        if shape_of(vars(cls)[name]) != shape
    ]
    assert not problems, "\n".join(problems)


# What each class defines itself at run time (the blocking sends' own path); __getattr__ forwards
# everything else, so a declaration outside ``if TYPE_CHECKING:`` would shadow a member with an empty
# body. (The drift test cannot see that: it takes such a stub for a real method of the right shape.)
DEFINED_AT_RUN_TIME = {
    "Producer": {"send", "send_batch", "_check_direct_call", "_finish"},
    "PushConsumer": set(),
    "LitePullConsumer": set(),
    "SimpleConsumer": set(),
    "AdminClient": set(),
}


def test_declarations_exist_for_type_checkers_only() -> None:
    for cls in CLASSES:
        defined = {
            name
            for name, value in vars(cls).items()
            if inspect.isfunction(value) or isinstance(value, property)
        }
        assert defined == DEFINED_AT_RUN_TIME[cls.__name__], f"{cls.__name__} defines {sorted(defined)}"
        assert not defined & declarations()[cls.__name__].keys()


def test_every_member_left_undeclared_exists() -> None:
    members = {name for cls in CLASSES for name in dir(asyncio_class(cls))}
    assert NOT_DECLARED.keys() <= members


def test_mypy_accepts_the_sample_and_rejects_exactly_its_misuses(tmp_path: Path) -> None:
    stdout, stderr, _ = mypy_api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "mypy"), str(SAMPLE)]
    )
    assert not stderr
    reported = set()
    for line in stdout.splitlines():
        found = re.match(r"(.+?):(\d+): error: .*\[([a-z-]+)\]$", line)
        if found and Path(found[1]).resolve() == SAMPLE.resolve():
            reported.add((int(found[2]), found[3]))
    expected = set()
    for number, line in enumerate(SAMPLE.read_text().splitlines(), 1):
        if marked := re.search(r"  # E: ([a-z, -]+)$", line):
            expected |= {(number, code.strip()) for code in marked[1].split(",")}
    assert expected, "the sample has no misuse to reject"
    assert reported == expected, stdout
