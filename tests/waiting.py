"""Waiting for a condition, the one way the tests wait for a state.

A test that needs something to have happened (a consumer registered, a file written, an offset
committed) polls for it with :func:`wait_until` (in a coroutine) or :func:`wait_until_blocking` (in a
plain function, or a thread that is not the loop's). The timeouts are generous because the suite
shares a loaded 2-core machine: they bound a test that would hang, they are never what it checks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["DEFAULT_TIMEOUT_S", "next_millisecond", "wait_until", "wait_until_blocking"]

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0


def _timed_out(message: str, timeout: float, value: object) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g} s waiting for {message} (last value: {value!r})")


async def wait_until(
    condition: Callable[[], Awaitable[T] | T],
    *,
    message: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = 0.02,
) -> T:
    """Call *condition* (a function or a coroutine function) until it returns something truthy, and
    return that; AssertionError naming *message*, what was awaited, after *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(message, timeout, value)
        await asyncio.sleep(interval)


def wait_until_blocking(
    condition: Callable[[], T], *, message: str, timeout: float = DEFAULT_TIMEOUT_S, interval: float = 0.02
) -> T:
    """:func:`wait_until` for code that is not in a coroutine: sleeps between calls of *condition*."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(message, timeout, value)
        time.sleep(interval)


def next_millisecond() -> int:
    """Waits for the wall clock's next millisecond and returns it: a time (ms since the epoch, taken as
    the store takes its timestamps) after every message stored before the call, and not after any
    message stored once it returned. What a test of "from this time on" puts between two sends."""
    before = time.time_ns() // 1_000_000
    return wait_until_blocking(
        lambda: (now := time.time_ns() // 1_000_000) > before and now,
        message="the next millisecond",
        interval=0,
    )
