"""The one exception hierarchy of CometMQ.

Every failure a caller can act on is a :class:`CometMQError`::

    CometMQError
    ├── ProtocolError            bytes that are not valid RocketMQ wire data
    │   └── RecordError          a stored message record that cannot be decoded
    ├── RequestRefused           a server refuses a request: answered with its code and remark
    │   ├── HeaderError          a request header field missing, of the wrong type or out of range
    │   └── AuthError            a user, an ACL or a credential refused (access control)
    ├── BrokerError              a client got an answer with a response code other than success
    │   └── TransactionError     a broker refused to end a transaction's half messages as asked
    ├── RemotingTimeoutError     no answer within the timeout
    ├── ConnectionClosedError    the connection closed (or never opened) before the answer
    │   └── ResponseLostError    it closed after the request was written: its outcome is unknown
    ├── ConfigError              a configuration file or option that cannot be used
    ├── StoreInUseError          a store directory another running store holds
    ├── StoreError               the store refuses a write it was asked for (disk full, not running)
    │   └── ReplicaOffsetError   replicated commit-log bytes that do not line up with this store's
    ├── Sql92Error               an SQL92 filter expression RocketMQ would refuse
    └── client-side errors       QueueNotRoutedError, NoRouteError, InvalidMessageError
                                 (MessageTooLargeError), ClientStateError, DataLossError, OptionError

:class:`RequestRefused` lives on the serving side (a processor raises it, the transport answers it);
:class:`BrokerError` on the calling side (the answer arrived and said no). They carry the same two
fields, a RocketMQ response code and a remark, but one is ours to send and the other theirs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from cometmq.client.message import MessageQueue


class CometMQError(Exception):
    """Base class of every error CometMQ raises on purpose."""


class ProtocolError(CometMQError):
    """Bytes on a connection that do not form a valid RocketMQ remoting frame or body."""


class RecordError(ProtocolError):
    """A stored message record (from a pull body or a commit-log segment) that cannot be decoded."""


class RequestRefused(CometMQError):
    """Raised by a server's request handler: the transport answers the request with *code* and *remark*
    (and logs no traceback: the request, not the server, was at fault)."""

    def __init__(self, code: int, remark: str) -> None:
        self.code = code
        self.remark = remark
        super().__init__(f"code {code}: {remark}")


class HeaderError(RequestRefused):
    """A request header field that is missing, not of its declared type, or out of its range."""


class AuthError(RequestRefused):
    """Access control refuses something: a request that is not signed or not allowed, a user or ACL
    that cannot be created, changed or found, a resource key or address pattern that does not parse.
    Its remark never shows a secret."""


class BrokerError(CometMQError):
    """A server answered with a response code other than success."""

    def __init__(self, code: int, remark: str | None) -> None:
        self.code = code
        self.remark = remark or ""
        super().__init__(f"code {code}: {self.remark}" if self.remark else f"code {code}")


class TransactionError(BrokerError):
    """Brokers answered the END of some half messages of a transaction with an error code: a
    definitive refusal (typically the half was settled otherwise already: discarded after the broker's
    last check-back, or ended the other way), not a lost END. A BrokerError because it is one (or more)
    such answers; ``code`` and ``remark`` are the first refusal's, ``refused`` lists every one as
    (topic, msg id, response code, remark)."""

    def __init__(self, transaction_id: str, state: str, refused: Sequence[tuple[str, str, int, str]]) -> None:
        self.transaction_id = transaction_id
        self.state = state
        self.refused = tuple(refused)
        _, _, code, remark = self.refused[0]
        super().__init__(code, remark)
        halves = "; ".join(
            f"{topic} message {msg_id}: code {code}: {remark}" for topic, msg_id, code, remark in self.refused
        )
        self.args = (f"ending transaction {transaction_id} {state} was refused for {halves}",)


class RemotingTimeoutError(CometMQError):
    """A request got no response within its timeout."""


class ConnectionClosedError(CometMQError):
    """The connection closed before the response arrived, or could not be opened."""


class ResponseLostError(ConnectionClosedError):
    """The connection closed after the request was written and before its response: the server may
    or may not have acted on it (as after a :class:`RemotingTimeoutError`)."""


class ConfigError(CometMQError):
    """A configuration file or option that cannot be used."""


class StoreInUseError(CometMQError):
    """A store directory whose lock another running store holds (in this process or another):
    one process per data directory. ``holder_pid`` is None while the holder has not written it."""

    def __init__(self, directory: Path, holder_pid: int | None) -> None:
        self.directory = directory
        self.holder_pid = holder_pid
        holder = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(f"the data directory {directory} is in use by {holder} (it holds {directory}/lock)")


class StoreError(CometMQError):
    """The store refuses a write it was asked for: the disk is full, a sync failed, or it is not
    running. The message says why, in the words a refused put's remark uses."""


class ReplicaOffsetError(StoreError):
    """Replicated commit-log bytes that cannot go into this store as they are: an offset that is not
    where this store's log ends (or, asked of a master, outside its log), a chunk crossing a segment
    end (the two stores' ``mappedFileSizeCommitLog`` differ), or bytes that are not valid records.
    Replicating further from that offset cannot succeed; the message names the offsets."""


class Sql92Error(CometMQError):
    """An expression RocketMQ's SQL92 filter would refuse.

    ``position`` is the 0-based character offset of the offending token (or of the end of the text),
    ``expected`` says what would have been valid there, ``problem`` what was found instead.
    """

    def __init__(self, problem: str, position: int, expected: str) -> None:
        self.problem = problem
        self.position = position
        self.expected = expected
        super().__init__(f"{problem} at position {position}: expected {expected}")


class QueueNotRoutedError(CometMQError):
    """The broker of a queue is not in any known route (it left the cluster, or the topic moved)."""


class NoRouteError(CometMQError):
    """No broker holds the topic and none offers TBW102 to create it (auto-create is off)."""


class InvalidMessageError(CometMQError):
    """A message the producer refuses before sending it: bad topic name, empty body, reserved
    property name, delay level out of range, a batch that mixes topics. Nothing was sent."""


class MessageTooLargeError(InvalidMessageError):
    """A body (or a whole batch) over the producer's ``max_message_size``. Nothing was sent."""


class ClientStateError(CometMQError):
    """A client (producer, consumer, admin) used before ``start()`` or after ``close()``."""


class DataLossError(CometMQError):
    """Part of a requested offset range is not in the queue: before its first offset (deleted by
    retention) or past its end (``available_min`` is then the queue's end, its next offset)."""

    def __init__(self, queue: MessageQueue, wanted_start: int, available_min: int) -> None:
        self.queue = queue
        self.wanted_start = wanted_start
        self.available_min = available_min
        if wanted_start < available_min:
            where = (
                f"offsets before {available_min} are gone from the start of the queue (deleted by retention?)"
            )
        else:
            where = (
                f"that is past the end of the queue, whose next offset is {available_min} "
                "(the topic deleted and created again?)"
            )
        super().__init__(f"{queue}: messages from offset {wanted_start} on were wanted, but {where}")


class OptionError(CometMQError, ValueError):
    """An option that is missing, unknown in combination, or not parseable."""
