"""The one life cycle of every client (Producer, PushConsumer, LitePullConsumer, AdminClient).

A client is made CREATED; ``await start()`` makes it RUNNING (and does nothing to a running one);
``await close(timeout)`` takes it through CLOSING to CLOSED, for good: closing twice does nothing,
closing before starting is allowed, and a closed client does not start again. ``async with`` is
start and close. A start that fails closes the client. Using a client that is not RUNNING raises
:class:`~cometmq.errors.ClientStateError` saying which client and what to do.
"""

from __future__ import annotations

import enum
from types import TracebackType
from typing import ClassVar, Self

from cometmq.errors import ClientStateError

# How long close() waits by default for work in progress (listener calls, callback sends, the last
# commit) before it lets go of it.
DEFAULT_CLOSE_TIMEOUT_S = 10.0


class ClientState(enum.Enum):
    """Where a client is in its life cycle."""

    CREATED = "created"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


# ClientState.RUNNING for the checks on hot paths (one per send, one per poll): on Python 3.11 an enum
# member read through its class is a descriptor lookup, several times slower than a module constant.
RUNNING = ClientState.RUNNING


class Client:
    """Base of the client classes: holds the state and runs the life cycle around two hooks,
    :meth:`_start` (the state is RUNNING while it runs) and :meth:`_close` (CLOSING)."""

    kind: ClassVar[str]  # what the client is called in messages: "producer", "admin client", ...

    def __init__(self) -> None:
        self._state = ClientState.CREATED

    @property
    def state(self) -> ClientState:
        """Where this client is in its life cycle."""
        return self._state

    async def start(self) -> None:
        """Connect and start the background work; a running client stays as it is."""
        if self._state is ClientState.RUNNING:
            return
        if self._state is not ClientState.CREATED:
            raise ClientStateError(f"this {self.kind} is {self._state.value}: make a new one")
        self._state = ClientState.RUNNING
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Stop, waiting up to ``timeout`` seconds for work in progress, and close every connection.
        Closing again does nothing; a client closed before it started never starts."""
        if self._state is ClientState.CREATED:
            self._state = ClientState.CLOSED
            return
        if self._state is not ClientState.RUNNING:
            return
        self._state = ClientState.CLOSING
        try:
            await self._close(timeout)
        finally:
            self._state = ClientState.CLOSED

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _check_running(self) -> None:
        """Raise :class:`ClientStateError` unless the client is RUNNING."""
        if self._state is not RUNNING:
            raise ClientStateError(self._not_running())

    def _not_running(self) -> str:
        if self._state is ClientState.CREATED:
            return f"this {self.kind} is not started: await start() first (or use async with)"
        return f"this {self.kind} is {self._state.value}: make a new one"

    async def _start(self) -> None:
        """Start the client's connections and tasks (the state is RUNNING already)."""

    async def _close(self, timeout: float) -> None:
        """Stop what :meth:`_start` started, waiting up to ``timeout`` s for work in progress."""
