"""Long polling: pulls that found nothing wait here until a message lands in their queue."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass


@dataclass(slots=True)
class HeldPull:
    offset: int
    codes: frozenset[int] | None  # tag codes that wake it; None: any message
    wake: asyncio.Future[None]


class PullHoldService:
    """Parks pulls per (topic, queue id) and wakes them when a matching message arrives.

    RocketMQ re-checks held pulls every 5 s; here the store's arrival callback wakes the exact pulls a
    message matches, so a consumer sees a new message as soon as it is stored.
    """

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], list[HeldPull]] = {}

    def park(self, topic: str, queue_id: int, offset: int, codes: frozenset[int] | None) -> HeldPull:
        """Register a pull in the same loop step as the read that found nothing, so a message stored
        right after it (even one from the same socket read) cannot slip past."""
        held = HeldPull(offset, codes, asyncio.get_running_loop().create_future())
        self._held.setdefault((topic, queue_id), []).append(held)
        return held

    async def wait(self, topic: str, queue_id: int, held: HeldPull, timeout: float) -> None:
        """Return when a message past the parked offset may match, or after ``timeout`` seconds."""
        key = (topic, queue_id)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(held.wake, timeout)
        finally:
            waiting = self._held.get(key)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.remove(held)
                if not waiting:
                    del self._held[key]

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """The store's arrival listener: wake the held pulls this message can satisfy."""
        waiting = self._held.get((topic, queue_id))
        if not waiting:
            return
        for held in waiting:
            if held.wake.done() or max_offset <= held.offset:
                continue
            if held.codes is None or tags_code in held.codes:
                held.wake.set_result(None)

    def wake_all(self) -> None:
        """Release every held pull (shutdown)."""
        for waiting in self._held.values():
            for held in waiting:
                if not held.wake.done():
                    held.wake.set_result(None)
