"""Running a command's coroutine on an event loop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any


def run_async(main: Coroutine[Any, Any, int], *, fast_loop: bool = False) -> int:
    """Run ``main`` to completion; servers (``fast_loop``) get uvloop when it is installed.

    ``COMETMQ_EVENT_LOOP=asyncio`` keeps the standard loop, to rule uvloop out when chasing a problem.
    """
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if fast_loop and os.environ.get("COMETMQ_EVENT_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main)
