"""The one exception hierarchy of CometMQ.

Every failure a caller can act on is a :class:`CometMQError`. Protocol violations on the wire are
:class:`ProtocolError`; an answer from a server that carries a non-success response code is a
:class:`BrokerError` with the RocketMQ code and the server's remark.
"""

from __future__ import annotations


class CometMQError(Exception):
    """Base class of every error CometMQ raises on purpose."""


class ProtocolError(CometMQError):
    """Bytes on a connection that do not form a valid RocketMQ remoting frame."""


class RemotingTimeoutError(CometMQError):
    """A request got no response within its timeout."""


class ConnectionClosedError(CometMQError):
    """The connection closed before the response arrived, or could not be opened."""


class BrokerError(CometMQError):
    """A server answered with a response code other than success."""

    def __init__(self, code: int, remark: str | None) -> None:
        self.code = code
        self.remark = remark or ""
        super().__init__(f"code {code}: {self.remark}" if self.remark else f"code {code}")


class ConfigError(CometMQError):
    """A configuration file or option that cannot be used."""
