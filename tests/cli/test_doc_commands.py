"""Every ``cometmq`` command the documentation names (in code: inline spans and fenced blocks) is a
command of the CLI's parser."""

from __future__ import annotations

import argparse
import functools
import re
from pathlib import Path

from cometmq.cli._main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# "cometmq" and the words after it; not part of a path, module or option (cometmq.client, -m cometmq
# ... is still a command).
COMMAND = re.compile(r"(?<![\w./-])cometmq((?: +[a-z][a-z0-9-]*)+)")
INLINE_CODE = re.compile(r"`([^`]+)`")


def code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, code) for every fenced block line (without its shell comment) and inline span."""
    found = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            found.append((number, line.split(" #")[0].rstrip()))
        else:
            found += [(number, span) for span in INLINE_CODE.findall(line)]
    return found


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


@functools.cache
def cli_parser() -> argparse.ArgumentParser:
    return build_parser()


def unknown_command(words: list[str]) -> str | None:
    """The first of *words* that should name a subcommand and names none, walking down the parser."""
    parser = cli_parser()
    for word in words:
        choices = subcommands(parser)
        if choices is None:
            return None  # a command's arguments follow
        if word not in choices:
            return word
        parser = choices[word]
    return None


def test_every_command_the_docs_name_exists() -> None:
    wrong = [
        f"{doc.relative_to(ROOT)}:{number}: cometmq{match.group(1)}"
        for doc in DOCS
        for number, code in code_lines(doc.read_text())
        for match in COMMAND.finditer(code)
        if unknown_command(match.group(1).split()) is not None
    ]
    assert wrong == []


def test_a_command_that_does_not_exist_is_found() -> None:
    assert unknown_command(["group", "reset-offsets"]) == "reset-offsets"
    assert unknown_command(["group", "reset", "GID"]) is None
    assert code_lines(
        "run `cometmq topic list` here\n```\ncometmq broker  # with cometmq installed\n```"
    ) == [
        (1, "cometmq topic list"),
        (3, "cometmq broker"),
    ]
