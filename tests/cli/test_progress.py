"""The progress bar of long commands (``cometmq bench``, ``cometmq pipeline demo``)."""

from __future__ import annotations

import io

from cometmq.console import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_the_bar_redrawn_in_place_then_cleared() -> None:
    screen = Terminal()
    progress = Progress("produce", 200, stream=screen)
    progress.advance(50)  # the first draw is immediate
    progress.advance(150)  # and so is the last, however soon after
    progress.close()
    first, last, cleared = screen.getvalue().split("\r")[1:]
    assert first.startswith("produce [#######") and " 25% 50/200 " in first and first.endswith("/s\x1b[K")
    assert last.startswith("produce [" + "#" * 30 + "] 100% 200/200 ")
    assert cleared == "\x1b[K"  # the line is free for the command's own report
    assert progress.done == 200


def test_between_draws_the_bar_is_not_redrawn() -> None:
    screen = Terminal()
    progress = Progress("consume", 1_000_000, stream=screen)
    for _ in range(1000):
        progress.advance(1)
    assert screen.getvalue().count("\r") < 10  # at most every 0.1 s, not once per message
    assert progress.done == 1000


def test_a_pipe_or_log_gets_nothing() -> None:
    log = io.StringIO()
    progress = Progress("produce", 10, stream=log)
    progress.advance(10)
    progress.close()
    assert log.getvalue() == ""
