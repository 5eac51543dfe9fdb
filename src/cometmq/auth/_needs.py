"""Which resources a request needs which actions on: the one table of access control."""

from __future__ import annotations

from cometmq.auth._model import Need
from cometmq.protocol.command import RemotingCommand


def needs_of(request: RemotingCommand, cluster: str | None) -> list[Need] | None:
    """What *request* needs, each :class:`Need` on its own; None if its code is not in the table.

    *cluster* is the broker's cluster name (``Cluster:<name>`` needs), None at a name server."""
    raise NotImplementedError
