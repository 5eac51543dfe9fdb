"""How every client checks its constructor options: before anything else is made, a bad value raises
:class:`~cometmq.errors.OptionError` (a ValueError) naming the option and what it allows. No client
clamps a value into range on its own."""

from __future__ import annotations

from collections.abc import Collection

from cometmq.errors import OptionError
from cometmq.protocol.naming import group_name_error


def check_range(option: str, value: float, minimum: float, maximum: float | None = None) -> None:
    """*value* within ``[minimum, maximum]`` (no upper bound when *maximum* is None)."""
    if maximum is None:
        if not minimum <= value:  # written so that NaN fails too
            raise OptionError(f"{option} must be at least {minimum}, not {value!r}")
    elif not minimum <= value <= maximum:
        raise OptionError(f"{option} must be within {minimum}..{maximum}, not {value!r}")


def check_positive(option: str, value: float) -> None:
    """*value* above 0 (a timeout or an interval in seconds)."""
    if not value > 0:
        raise OptionError(f"{option} must be more than 0 seconds, not {value!r}")


def check_choice(option: str, value: str, choices: Collection[str]) -> None:
    """*value* one of *choices*."""
    if value not in choices:
        allowed = ", ".join(repr(choice) for choice in sorted(choices))
        raise OptionError(f"{option} must be one of {allowed}, not {value!r}")


def check_group(role: str, group: str) -> None:
    """A legal group name, refused here rather than later (and less clearly) by a broker. *role* is
    "producer" or "consumer"."""
    problem = group_name_error(group)
    if problem is not None:
        raise OptionError(f"{role} group {group!r}: {problem}")
