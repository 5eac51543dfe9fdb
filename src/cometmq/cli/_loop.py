"""Running a command's coroutine on an event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from cometmq.client.blocking import new_event_loop


def run_async(main: Coroutine[Any, Any, int], *, fast_loop: bool = False) -> int:
    """Run ``main`` to completion; servers and benchmarks (``fast_loop``) get uvloop when it is installed.

    ``COMETMQ_EVENT_LOOP=asyncio`` keeps the standard loop, to rule uvloop out when chasing a problem.
    """
    with asyncio.Runner(loop_factory=new_event_loop if fast_loop else None) as runner:
        return runner.run(main)
