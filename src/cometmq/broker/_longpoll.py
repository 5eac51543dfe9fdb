"""Long polling: pulls that found nothing wait here until a message lands in their queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class HeldPull:
    offset: int
    codes: frozenset[int] | None  # tag codes that wake it; None: any message
    # Called on a matching arrival: answers the pull and returns True, or returns False to keep it
    # held (it may move ``offset`` on, past messages a filter rejected).
    answer: Callable[[HeldPull], bool]
    wake: asyncio.Future[bool]  # True: answered on arrival; False: timed out or released


class PullHoldService:
    """Parks pulls per (topic, queue id) and answers them when a matching message arrives.

    RocketMQ re-checks held pulls every 5 s; here the store's arrival callback answers the exact pulls
    a message matches, in the same loop step, so a consumer sees a new message as soon as it is stored.
    """

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], list[HeldPull]] = {}

    def park(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        codes: frozenset[int] | None,
        answer: Callable[[HeldPull], bool],
        timeout: float,
    ) -> HeldPull:
        """Register a pull in the same loop step as the read that found nothing, so a message stored
        right after it (even one from the same socket read) cannot slip past. Its ``wake`` resolves
        True when an arrival answers it, False after ``timeout`` seconds or :meth:`wake_all` (the
        caller answers it then); cancelling ``wake`` gives it up.

        The entry leaves the service when ``wake`` is done, whoever awaits it: a pull whose
        connection closed before its task's first step is still forgotten at its deadline."""
        loop = asyncio.get_running_loop()
        held = HeldPull(offset, codes, answer, loop.create_future())
        key = (topic, queue_id)
        self._held.setdefault(key, []).append(held)
        # A bare timer resolves the future, rather than asyncio.wait_for in the waiter, which resumes
        # one loop step later (its own waiter) and costs a handle per wait.
        timer = loop.call_later(timeout, _release, held.wake)
        held.wake.add_done_callback(lambda _: self._forget(key, held, timer))
        return held

    def _forget(self, key: tuple[str, int], held: HeldPull, timer: asyncio.TimerHandle) -> None:
        timer.cancel()
        waiting = self._held.get(key)
        if waiting is not None:
            with contextlib.suppress(ValueError):
                waiting.remove(held)
            if not waiting:
                del self._held[key]

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """The store's arrival listener: answer the held pulls this message can satisfy.

        Answered here, in the sender's loop step, rather than by waking the held pull's task, which
        runs a step later and after the send's own reply: ``cometmq bench latency`` end to end p50
        ~725 → ~565 µs on a 2-core VM.
        """
        waiting = self._held.get((topic, queue_id))
        if not waiting:
            return
        for held in waiting:
            if held.wake.done() or max_offset <= held.offset:
                continue
            if held.codes is None or tags_code in held.codes:
                try:
                    answered = held.answer(held)
                except Exception as exc:  # the pull's task turns it into an error response
                    held.wake.set_exception(exc)
                    continue
                if answered:
                    held.wake.set_result(True)

    def wake_all(self) -> None:
        """Release every held pull (shutdown)."""
        for waiting in self._held.values():
            for held in waiting:
                _release(held.wake)


def _release(wake: asyncio.Future[bool]) -> None:
    if not wake.done():
        wake.set_result(False)
