"""SimpleConsumer: RocketMQ 5's receive-then-ack consumer, over the remoting protocol (POP consumption).

The application asks for messages (:meth:`SimpleConsumer.receive`), processes them and acks each one
(:meth:`SimpleConsumer.ack`) within its *invisible duration*; a message not acked in time is delivered
again, to this consumer or another of its group, with ``delivery_attempt`` one higher; after the
group's retryMaxTimes redeliveries it goes to the group's dead-letter topic. The broker keeps what is
in flight: nothing is held by the client, consumers of one group need no rebalance, and any number
of them may share a topic's queues. docs/client.md, "SimpleConsumer", describes it.

    >>> async with SimpleConsumer("GID_orders", "127.0.0.1:9876", subscriptions={"Orders": "*"}) as consumer:
    ...     for message in await consumer.receive(16, invisible_duration=30):
    ...         handle(message)
    ...         await consumer.ack(message)
"""

from __future__ import annotations

import itertools
import ssl
from collections.abc import Mapping

from cometmq.auth import Credentials
from cometmq.client._instance import (
    POLL_NAMESRV_INTERVAL_RANGE_S,
    POLL_NAMESRV_INTERVAL_S,
    ClientInstance,
    decode_answer,
)
from cometmq.client._lifecycle import Client, ClientState
from cometmq.client._options import (
    check_choice,
    check_credentials,
    check_group,
    check_positive,
    check_range,
    tls_context,
)
from cometmq.client._popapi import ack_header, change_invisible_header, changed_handle, pop_header, popped
from cometmq.client.message import ReceivedMessage
from cometmq.errors import (
    ClientStateError,
    CometMQError,
    QueueNotRoutedError,
)
from cometmq.protocol import RequestCode
from cometmq.protocol.naming import PERM_READ
from cometmq.protocol.pop import (
    MAX_POP_MESSAGES,
    ChangeInvisibleTimeResponseHeader,
    ConsumeInitMode,
    ExtraInfo,
)
from cometmq.protocol.subscription import EXPRESSION_SQL92, EXPRESSION_TAG, SUB_ALL, SubscriptionData

__all__ = ["SimpleConsumer"]

# The longest invisible duration a receive or a change may ask for (the broker's bound: 12 hours).
MAX_INVISIBLE_DURATION_S = 12 * 3600.0
# The longest a receive may wait for messages to arrive (the broker holds a pop at most 120 s).
MAX_AWAIT_DURATION_S = 120.0


class SimpleConsumer(Client):
    """A consumer of group ``group`` against the NameServer(s) ``namesrv`` that receives messages and
    acks them one by one (RocketMQ 5's SimpleConsumer).

    ``subscriptions`` maps topics to filter expressions (``*``, tags joined by ``||``); more can be
    added with :meth:`subscribe`, also with SQL92 conditions. ``await_duration`` is how long (seconds)
    a :meth:`receive` that finds nothing waits for messages to arrive (long polling on a broker).
    ``fifo`` makes every receive an order pop, for a FIFO group (``cometmq group create --fifo``): a
    queue's messages are handed to one consumer at a time, and the next only once they are acked or
    their invisible duration passed. ``consume_from`` (``"first"`` or ``"last"``) says where a group
    starts on a queue it never consumed, as RocketMQ's ConsumeInitMode (a queue whose first message
    is still stored is read from the start either way, as RocketMQ's broker does).
    ``credentials`` and ``tls`` as for every client (:class:`cometmq.client.Producer`).
    """

    kind = "simple consumer"

    def __init__(
        self,
        group: str,
        namesrv: str,
        *,
        subscriptions: Mapping[str, str] | None = None,
        await_duration: float = 30.0,
        fifo: bool = False,
        consume_from: str = "last",
        instance_name: str | None = None,
        request_timeout: float = 3.0,
        poll_name_server_interval: float = POLL_NAMESRV_INTERVAL_S,
        credentials: Credentials | None = None,
        tls: bool | ssl.SSLContext = False,
    ) -> None:
        check_group("consumer", group)
        check_credentials(credentials)
        check_range("await_duration", await_duration, 0, MAX_AWAIT_DURATION_S)
        check_positive("request_timeout", request_timeout)
        check_range("poll_name_server_interval", poll_name_server_interval, *POLL_NAMESRV_INTERVAL_RANGE_S)
        check_choice("consume_from", consume_from, ("first", "last"))
        super().__init__()
        self.group = group
        self.namesrv = namesrv
        self.await_duration = await_duration
        self.fifo = fifo
        self.consume_from = consume_from
        self._instance_name = instance_name
        self._request_timeout = request_timeout
        self._poll_name_server_interval = poll_name_server_interval
        self._credentials = credentials
        self._ssl_context = tls_context(tls)
        self._subscriptions: dict[str, SubscriptionData] = {}
        for topic, expression in (subscriptions or {}).items():
            self.subscribe(topic, expression)
        self._instance: ClientInstance | None = None
        self._turn = itertools.count()  # which (topic, broker) a receive tries first

    # life cycle --------------------------------------------------------------------------------

    async def _start(self) -> None:
        self._instance = ClientInstance(
            self.namesrv,
            instance_name=self._instance_name,
            request_timeout=self._request_timeout,
            route_refresh_interval=self._poll_name_server_interval,
            credentials=self._credentials,
            ssl_context=self._ssl_context,
        )
        self._instance.start()
        for topic in self._subscriptions:
            await self._instance.route(topic)

    async def _close(self, timeout: float) -> None:
        if self._instance is not None:
            await self._instance.close()

    @property
    def instance(self) -> ClientInstance:
        """The client instance (connections, routes) of a started consumer."""
        if self._instance is None or self._state is ClientState.CLOSED:
            raise ClientStateError(self._not_running())
        return self._instance

    # subscriptions -----------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = SUB_ALL, *, sql92: bool = False) -> None:
        """Receive ``topic``'s messages matching ``expression``: ``*``, tags joined by ``||``, or with
        ``sql92=True`` an SQL92 condition on message properties (the broker must run with
        ``enablePropertyFilter=true``)."""
        self._subscriptions[topic] = SubscriptionData.from_expression(
            topic, expression, EXPRESSION_SQL92 if sql92 else EXPRESSION_TAG
        )

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)

    def subscriptions(self) -> dict[str, str]:
        """Each subscribed topic and its filter expression."""
        return {topic: sub.sub_string for topic, sub in self._subscriptions.items()}

    # receiving ---------------------------------------------------------------------------------

    async def receive(
        self, max_messages: int = 16, invisible_duration: float = 30.0, *, await_duration: float | None = None
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` (1…32) messages of the subscribed topics, each invisible to every
        other receive for ``invisible_duration`` seconds: ack it (:meth:`ack`) within that time, or it
        is delivered again. When there is nothing to receive, waits up to ``await_duration`` seconds
        (default: the consumer's) for messages to arrive; an empty list after that. :class:`BrokerError`
        (POLLING_TIMEOUT, "timeout too much") when the broker found the request too late to serve: this
        machine's clock is behind the broker's, or the request was slow on its way."""
        self._check_running()
        check_range("max_messages", max_messages, 1, MAX_POP_MESSAGES)
        check_range("invisible_duration", invisible_duration, 0.001, MAX_INVISIBLE_DURATION_S)
        wait = self.await_duration if await_duration is None else await_duration
        check_range("await_duration", wait, 0, MAX_AWAIT_DURATION_S)
        if not self._subscriptions:
            raise CometMQError("this simple consumer subscribes to no topic: subscribe() first")
        targets = await self._targets()
        if not targets:
            raise QueueNotRoutedError(f"no broker serves any of the topics {sorted(self._subscriptions)}")
        first = next(self._turn) % len(targets)
        targets = targets[first:] + targets[:first]
        invisible_ms = max(1, round(invisible_duration * 1000))
        # Every broker once without waiting, then one of them (in turn) held for the await duration.
        for topic, broker_name in targets:
            found = await self._pop(topic, broker_name, max_messages, invisible_ms, 0)
            if found:
                return found
        if wait <= 0:
            return []
        topic, broker_name = targets[0]
        return await self._pop(topic, broker_name, max_messages, invisible_ms, round(wait * 1000))

    async def _targets(self) -> list[tuple[str, str]]:
        """Each subscribed topic with each broker that has readable queues of it and a master (a
        slave serves no pops)."""
        instance = self.instance
        targets = []
        for topic in self._subscriptions:
            route = await instance.route(topic)
            if route is None:
                continue
            for data in sorted(route.queue_datas, key=lambda q: q.broker_name):
                if (
                    data.perm & PERM_READ
                    and data.read_queue_nums > 0
                    and instance.broker_addr(data.broker_name)
                ):
                    targets.append((topic, data.broker_name))
        return targets

    async def _pop(
        self, topic: str, broker_name: str, max_messages: int, invisible_ms: int, poll_ms: int
    ) -> list[ReceivedMessage]:
        instance = self.instance
        addr = self._master(broker_name)
        header = pop_header(
            self.group,
            self._subscriptions[topic],
            max_messages,
            invisible_ms,
            poll_ms,
            init_mode=ConsumeInitMode.MIN if self.consume_from == "first" else ConsumeInitMode.MAX,
            order=self.fifo,
        )
        timeout = poll_ms / 1000 + self._request_timeout
        try:
            response = await instance.invoke(addr, RequestCode.POP_MESSAGE, header.encode(), timeout=timeout)
        except CometMQError as exc:
            await instance.refresh_route_if_unreachable(topic, exc)
            raise
        return popped(response, broker_name)

    def _master(self, broker_name: str) -> str:
        addr = self.instance.broker_addr(broker_name)
        if addr is None:
            raise QueueNotRoutedError(f"no master address is known for broker {broker_name!r}")
        return addr

    # settling ----------------------------------------------------------------------------------

    def _handle(self, message: ReceivedMessage) -> ExtraInfo:
        handle = message.receipt_handle
        if handle is None:
            raise CometMQError(f"{message!r} has no receipt handle: it was not received by a SimpleConsumer")
        try:
            return ExtraInfo.parse(handle)
        except ValueError as exc:
            raise CometMQError(f"{message!r} has a malformed receipt handle: {exc}") from None

    async def ack(self, message: ReceivedMessage) -> None:
        """The message is consumed: it is never delivered again. :class:`BrokerError` with code
        NO_MESSAGE (208) when its receipt handle no longer holds (its invisible duration passed, and
        it will be, or was, delivered again)."""
        self._check_running()
        info = self._handle(message)
        header = ack_header(self.group, message.topic, info)
        await self.instance.invoke_ok(
            self._master(info.broker_name), RequestCode.ACK_MESSAGE, header.encode()
        )

    async def change_invisible_duration(self, message: ReceivedMessage, duration: float) -> None:
        """Keep the message invisible for ``duration`` seconds from now (0: deliver it again at once).
        The message gets a new receipt handle (``receipt_handle``), which :meth:`ack` then uses; the
        old one no longer holds. :class:`BrokerError` as for :meth:`ack`."""
        self._check_running()
        check_range("duration", duration, 0, MAX_INVISIBLE_DURATION_S)
        info = self._handle(message)
        header = change_invisible_header(self.group, message.topic, info, round(duration * 1000))
        response = await self.instance.invoke_ok(
            self._master(info.broker_name), RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.encode()
        )
        answer = decode_answer(ChangeInvisibleTimeResponseHeader, response)
        message.set_receipt_handle(str(changed_handle(info, answer)))
