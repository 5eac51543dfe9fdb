"""Loading and saving the broker's JSON metadata files under ``<data-dir>/config``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import orjson

from cometmq.atomic_file import read_with_backup, write_atomic
from cometmq.protocol import fastjson
from cometmq.protocol.naming import NameRule, name_remark, printable

log = logging.getLogger("cometmq.broker")

_Entry = TypeVar("_Entry")

# What reading one malformed entry of a table raises.
_UNREADABLE = (KeyError, TypeError, ValueError, AttributeError, OverflowError)


def load_json_config(path: Path) -> dict[str, Any] | None:
    """The parsed file, or its ``.bak`` when the file is corrupt; None when neither exists."""
    loaded = _load(path)
    return None if loaded is None else loaded[2]


def load_json_table(
    path: Path, table_key: str, what: str, read: Callable[[str, Any], _Entry | None]
) -> tuple[dict[str, Any], dict[str, _Entry]] | None:
    """The parsed file (as :func:`load_json_config`) and the entries of its table *table_key* as *read*
    makes them from their key and value; None when there is no file.

    One bad entry never keeps the broker from starting: an entry *read* refuses (it raises KeyError,
    TypeError, ValueError, AttributeError or OverflowError) is skipped with one warning line naming it
    (*what* says what it is), and the file it came from is copied to ``<name>.skipped.bak``, which saving
    the table again never replaces. *read* returns None for an entry to leave out silently.
    """
    loaded = _load(path)
    if loaded is None:
        return None
    source, data, obj = loaded
    table = obj.get(table_key) or {}
    kept = path.with_name(path.name + ".skipped.bak")
    copied = False

    def skip(label: str, reason: object) -> None:
        nonlocal copied
        if not copied:  # once per load, however many entries are skipped
            _keep(data, kept)
            copied = True
        log.warning("skipping %s of %s (%s); the file is kept as %s", label, source, reason, kept.name)

    entries: dict[str, _Entry] = {}
    if not isinstance(table, dict):
        skip(f"the whole {table_key}", "not a JSON object")
        return obj, entries
    for key, raw in table.items():
        try:
            entry = read(key, raw)
        except _UNREADABLE as exc:
            skip(f"{what} {key!r}", printable(str(exc)))
            continue
        if entry is not None:
            entries[key] = entry
    return obj, entries


def read_entries(
    table: Any, what: str, read: Callable[[str, Any], _Entry | None], source: str
) -> dict[str, _Entry]:
    """The entries of a table another broker sent (a slave's copy of its master's), as *read* makes
    them from their key and value: an entry *read* refuses (as for :func:`load_json_table`) is skipped
    with one warning naming it (*what* says what it is) and *source*. ValueError when *table* is not
    a JSON object."""
    if not isinstance(table, dict):
        raise ValueError(f"the {what} table from {source} is not a JSON object")
    entries: dict[str, _Entry] = {}
    for key, raw in table.items():
        try:
            entry = read(key, raw)
        except _UNREADABLE as exc:
            log.warning("skipping %s %r from %s (%s)", what, key, source, printable(str(exc)))
            continue
        if entry is not None:
            entries[key] = entry
    return entries


def check_stored_name(what: str, name: str, rule: NameRule) -> None:
    """For a *read* of :func:`load_json_table`: ValueError, so the entry is skipped, if *rule* refuses
    *name*."""
    if (problem := rule(name)) is not None:
        raise ValueError(name_remark(what, name, problem))


def _keep(data: bytes, kept: Path) -> None:
    try:
        kept.write_bytes(data)
    except OSError as exc:
        log.error("cannot keep a copy as %s: %s", kept, exc)


def _load(path: Path) -> tuple[Path, bytes, dict[str, Any]] | None:
    for candidate, data in read_with_backup(path):
        try:
            obj = fastjson.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            log.error("%s is corrupt (%s); trying its backup", candidate, exc)
            continue
        if isinstance(obj, dict):
            if candidate != path:
                log.warning("loaded %s from its backup %s", path.name, candidate)
            return candidate, data, obj
        log.error("%s does not hold a JSON object; trying its backup", candidate)
    return None


def save_json_config(path: Path, obj: Any) -> None:
    # orjson: the standard library's encoder falls back to pure Python when it indents, about a
    # second for a table of 10 000 topics, which every creation of a topic would pay.
    write_atomic(path, orjson.dumps(obj, option=_JSON_FILE_OPTIONS))


# Indented with sorted keys, as RocketMQ writes its files; integer keys (queue ids) as strings.
_JSON_FILE_OPTIONS: Final = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


class MetadataFile:
    """One JSON metadata file of the broker, written whole (``save_json_config``) after a change.

    A write that fails (a full disk, an I/O error) never fails the request that made the change:
    the table in memory stays the truth, the failure is logged once (not at every attempt), and the
    owner writes the table again later (``pending``; the broker's housekeeping retries) until it
    succeeds. Writes may run on executor threads; the owner orders them.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pending = False  # the last write failed: the file is older than the table

    def save(self, obj: Any) -> bool:
        """Write *obj*; whether it worked."""
        try:
            save_json_config(self.path, obj)
        except OSError as exc:
            if not self.pending:
                log.error(
                    "cannot write %s (%s); the broker keeps the change in memory and writes it again later",
                    self.path,
                    exc.strerror or exc,
                )
            self.pending = True
            return False
        if self.pending:
            self.pending = False
            log.warning("wrote %s again after a failed write", self.path)
        return True
