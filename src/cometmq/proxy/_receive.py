"""The proxy's consuming calls of MessagingService: QueryAssignment, ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, and the offset-based PullMessage, UpdateOffset,
GetOffset and QueryOffset.

Each call becomes the remoting request a RocketMQ 5 proxy makes of the broker the request names
(docs/proxy.md, "Consuming"): a receive is a POP_MESSAGE of every queue of the topic on that broker (an
order pop for a FIFO group), an ack an ACK_MESSAGE, a change of invisible duration a
CHANGE_MESSAGE_INVISIBLETIME, a forward to the dead-letter queue a CONSUMER_SEND_MSG_BACK with delay
level -1 and then an ack, a pull a PULL_MESSAGE. A refusal is answered in the call's status, with the v2
code the clients act on, never as a gRPC error.

The receipt handle a client holds is the broker's (the ``POP_CK`` of the popped message, RocketMQ's
ExtraInfoUtil text), a space, and the message's commit-log offset, as RocketMQ's proxy writes it: the
broker, queue, offset and retry mark an ack needs are in the broker's part, and the commit-log offset is
what a forward to the dead-letter queue names the message by (docs/protocol.md#proxy-consuming).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import AsyncIterator
from typing import Final

from cometmq.client import PullResult, PullStatus
from cometmq.client.instance import (
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    ack_header,
    change_invisible_header,
    changed_handle,
    commit_offset,
    decode_answer,
    max_offset,
    min_offset,
    offset_for_timestamp,
    pop_header,
    popped,
    pull,
    query_offset,
)
from cometmq.client.message import MessageQueue, ReceivedMessage
from cometmq.errors import BrokerError, CometMQError, ProtocolError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import ConsumerSendMsgBackRequestHeader
from cometmq.protocol.naming import PERM_READ
from cometmq.protocol.pop import (
    MAX_POP_MESSAGES,
    POP_CK,
    ChangeInvisibleTimeResponseHeader,
    ExtraInfo,
)
from cometmq.protocol.route import MASTER_ID, TopicRouteData
from cometmq.protocol.subscription import EXPRESSION_SQL92, EXPRESSION_TAG, SUB_ALL, SubscriptionData
from cometmq.proxy._clients import check_group, client_id_of
from cometmq.proxy._context import ProxyContext
from cometmq.proxy._convert import Refusal, check_topic, incoming_message
from cometmq.proxy._metadata import GroupSettings
from cometmq.proxy._pb import definition_pb2 as v2
from cometmq.proxy._pb import service_pb2 as pb
from cometmq.proxy._routes import permission_of
from cometmq.proxy._status import Context, code_of_response, ok, respond, status, status_of_error

log = logging.getLogger("cometmq.proxy")

__all__ = ["Receiving", "check_live", "parse_receipt_handle"]

# RocketMQ proxy's defaults (ProxyConfig): the long-polling window a receive may ask for, the shortest
# invisible time a receive may set, the longest any call may set, and the invisible time of a receive
# asking the proxy to renew it (a push consumer's, which names none).
MIN_LONG_POLLING_MS: Final = 5_000
MAX_LONG_POLLING_MS: Final = 20_000
MIN_RECEIVE_INVISIBLE_MS: Final = 10_000
MAX_INVISIBLE_MS: Final = 12 * 3600 * 1000
AUTO_RENEW_INVISIBLE_MS: Final = 60_000
# RocketMQ proxy's renewal of auto-renew receives (renewSchedulePeriodMillis, renewAheadTimeMillis,
# renewMaxTimeMillis): how often the proxy looks, how long before a message becomes visible it renews it,
# and for how long at most.
RENEW_PERIOD_S: Final = 5.0
RENEW_AHEAD_MS: Final = 10_000
RENEW_MAX_MS: Final = 3 * 3600 * 1000
# A held pop is answered this long before the client's deadline, so that the answer arrives in time.
DEADLINE_MARGIN_MS: Final = 500
# The 5.x clients' default request timeout (their Settings.request_timeout).
CLIENT_REQUEST_TIMEOUT_MS: Final = 3_000
# A pull is held by the broker at most this long (RocketMQ's BROKER_SUSPEND_MAX_TIME_MILLIS), and
# returns at most this many messages.
MAX_PULL_SUSPEND_MS: Final = 15_000
MAX_PULL_MESSAGES: Final = 32

# The broker codes that say a handle no longer names a message in flight (acked, revived, changed).
_STALE_HANDLE_CODES: Final = frozenset({ResponseCode.NO_MESSAGE, ResponseCode.MESSAGE_ILLEGAL})


def parse_receipt_handle(text: str) -> ExtraInfo:
    """A receipt handle a client sent: the broker's, with or without the commit-log offset the proxy
    appends; :class:`Refusal` (INVALID_RECEIPT_HANDLE) says what is wrong with it."""
    try:
        return ExtraInfo.parse(text)
    except ValueError as exc:
        raise Refusal(v2.INVALID_RECEIPT_HANDLE, f"the receipt handle cannot be read: {exc}") from None


def check_live(handle: ExtraInfo) -> None:
    """Refuse a handle whose invisible time is over: its message may be another consumer's by now
    (RocketMQ's proxy refuses it before asking the broker)."""
    if handle.visible_at <= time.time() * 1000:
        raise Refusal(v2.INVALID_RECEIPT_HANDLE, "receipt handle is expired")


def _broker_refusal(response: RemotingCommand) -> Refusal:
    remark = response.remark or f"the broker answered code {response.code}"
    if response.code in _STALE_HANDLE_CODES:
        return Refusal(v2.INVALID_RECEIPT_HANDLE, remark)
    if response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED:
        return Refusal(v2.ILLEGAL_FILTER_EXPRESSION, remark)
    return Refusal(code_of_response(response.code), remark)


def _check_invisible_time(millis: int, minimum: int = 0) -> int:
    if millis < minimum:
        raise Refusal(v2.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too small. min is {minimum}")
    if millis > MAX_INVISIBLE_MS:
        raise Refusal(v2.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too large. max is {MAX_INVISIBLE_MS}")
    return millis


def _subscription(topic: str, expression: v2.FilterExpression) -> SubscriptionData:
    if expression.type == v2.SQL:
        if not expression.expression.strip():
            raise Refusal(v2.ILLEGAL_FILTER_EXPRESSION, "the SQL92 filter expression is empty")
        return SubscriptionData.from_expression(topic, expression.expression, EXPRESSION_SQL92)
    return SubscriptionData.from_expression(topic, expression.expression or SUB_ALL, EXPRESSION_TAG)


def _topic_and_group(topic: v2.Resource, group: v2.Resource) -> tuple[str, str]:
    check_topic(topic.name)
    check_group(group.name)
    return topic.name, group.name


def _readable_brokers(route: TopicRouteData) -> list[str]:
    """The broker groups with readable queues of the topic and a master, by name."""
    masters = {broker.broker_name for broker in route.broker_datas if broker.master_addr is not None}
    return sorted(
        data.broker_name
        for data in route.queue_datas
        if data.perm & PERM_READ and data.read_queue_nums > 0 and data.broker_name in masters
    )


@dataclasses.dataclass(slots=True)
class _Renewal:
    """A message of an auto-renew receive, kept invisible while its consumer is connected."""

    topic: str
    handle: ExtraInfo  # the latest, which the proxy settles the message with
    received_ms: int


def _client_id(context: Context) -> str:
    """The calling client's id, or "" (a call without one is served, but nothing is renewed for it)."""
    try:
        return client_id_of(context)
    except Refusal:
        return ""


def _handle_of(message: ReceivedMessage) -> ExtraInfo:
    return dataclasses.replace(
        ExtraInfo.parse(message.properties[POP_CK]), commitlog_offset=message.commitlog_offset
    )


class Receiving:
    """Serves the consuming calls of MessagingService for the service in _service.py."""

    def __init__(self, proxy: ProxyContext) -> None:
        self._proxy = proxy
        self._brokers = proxy.brokers
        self._next_broker = itertools.count()
        # The messages of auto-renew receives: (client id, group, message id) -> renewal.
        self._renewals: dict[tuple[str, str, str], _Renewal] = {}
        self._renewing: asyncio.Task[None] | None = None

    async def close(self) -> None:
        """Stop renewing; the messages held for connected consumers become visible in their time."""
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
            self._renewing = None
        self._renewals.clear()

    async def _group_settings(self, group: str, route: TopicRouteData) -> GroupSettings:
        return await self._proxy.metadata.group_settings(group, self._proxy.routes.master_addrs(route))

    async def _master_of(self, broker_name: str, topic: str) -> str:
        """The master of broker group *broker_name*, learnt from *topic*'s route if not client yet."""
        addr = self._brokers.broker_addr(broker_name)
        if addr is None:
            await self._proxy.routes.route(topic)
            addr = self._brokers.broker_addr(broker_name)
        if addr is None:
            raise Refusal(v2.BAD_REQUEST, f"no broker {broker_name} with a master serves topic {topic}")
        return addr

    async def _invoke(
        self, broker_name: str, topic: str, code: int, fields: dict[str, str], timeout: float | None = None
    ) -> RemotingCommand:
        """One request to the master of *broker_name*; a failure to reach it is a :class:`Refusal`."""
        addr = await self._master_of(broker_name, topic)
        try:
            return await self._brokers.invoke(addr, code, fields, timeout=timeout)
        except CometMQError as exc:
            # A broker gone: the client's next receive finds the route without it.
            await self._brokers.refresh_route_if_unreachable(topic, exc)
            failed = status_of_error(exc)
            raise Refusal(failed.code, failed.message) from None

    async def _ask(self, broker_name: str, topic: str, code: int, fields: dict[str, str]) -> RemotingCommand:
        """:meth:`_invoke`, and any answer but SUCCESS a :class:`Refusal`."""
        response = await self._invoke(broker_name, topic, code, fields)
        if response.code != ResponseCode.SUCCESS:
            raise _broker_refusal(response)
        return response

    # QueryAssignment --------------------------------------------------------------------------------

    async def query_assignment(
        self, request: pb.QueryAssignmentRequest, context: Context
    ) -> pb.QueryAssignmentResponse:
        return await respond(pb.QueryAssignmentResponse, self._query_assignment(request))

    async def _query_assignment(self, request: pb.QueryAssignmentRequest) -> pb.QueryAssignmentResponse:
        """Every broker group with readable queues of the topic: as one queue (id -1, every queue of
        the broker) for a group that is not FIFO, queue by queue for a FIFO group; each reached through
        this proxy at the endpoints the client reached it by (RocketMQ's RouteActivity)."""
        topic, group = _topic_and_group(request.topic, request.group)
        if not request.endpoints.addresses:
            raise Refusal(v2.ILLEGAL_ACCESS_POINT, "the request names no endpoints")
        route = await self._proxy.routes.route(topic)
        fifo = (await self._group_settings(group, route)).fifo
        readable = set(_readable_brokers(route))
        assignments = []
        for data in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if data.broker_name not in readable:
                continue
            broker = v2.Broker(name=data.broker_name, id=MASTER_ID, endpoints=request.endpoints)
            permission = permission_of(data.perm)
            for queue_id in range(data.read_queue_nums) if fifo else (-1,):
                queue = v2.MessageQueue(topic=request.topic, id=queue_id, broker=broker)
                queue.permission = permission  # type: ignore[assignment]
                assignments.append(v2.Assignment(message_queue=queue))
        if not assignments:
            raise Refusal(v2.FORBIDDEN, "no readable queue")
        return pb.QueryAssignmentResponse(status=ok(), assignments=assignments)

    # ReceiveMessage ---------------------------------------------------------------------------------

    async def receive_message(
        self, request: pb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[pb.ReceiveMessageResponse]:
        """A status, then the messages, then the time of delivery: the stream every client reads."""
        try:
            messages = await self._receive(request, context)
        except Refusal as refusal:
            yield pb.ReceiveMessageResponse(status=status(refusal.code, refusal.message))
        else:
            if messages:
                yield pb.ReceiveMessageResponse(status=ok())
                for message in messages:
                    yield pb.ReceiveMessageResponse(message=message)
            else:
                yield pb.ReceiveMessageResponse(status=status(v2.MESSAGE_NOT_FOUND, "no new message"))
        delivered = pb.ReceiveMessageResponse()
        delivered.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        yield delivered

    @staticmethod
    def _polling_ms(request: pb.ReceiveMessageRequest, context: Context) -> int:
        """How long the broker may hold the pop: what the client asked (when it asked nothing, its
        deadline less half a request timeout, as RocketMQ's proxy computes it), within RocketMQ's
        window and short of the deadline."""
        remaining_s: float | None = context.time_remaining()
        remaining = None if remaining_s is None else int(remaining_s * 1000)
        polling: int
        if request.HasField("long_polling_timeout"):
            polling = request.long_polling_timeout.ToMilliseconds()
        elif remaining is not None:
            polling = remaining - CLIENT_REQUEST_TIMEOUT_MS // 2
        else:
            polling = MAX_LONG_POLLING_MS
        polling = min(max(polling, MIN_LONG_POLLING_MS), MAX_LONG_POLLING_MS)
        if remaining is None or polling < remaining - DEADLINE_MARGIN_MS:
            return polling
        if remaining < MIN_LONG_POLLING_MS:
            raise Refusal(
                v2.ILLEGAL_POLLING_TIME,
                "The deadline time remaining is not enough for polling, please check network condition",
            )
        return remaining - DEADLINE_MARGIN_MS

    async def _receive(self, request: pb.ReceiveMessageRequest, context: Context) -> list[v2.Message]:
        polling_ms = self._polling_ms(request, context)
        topic, group = _topic_and_group(request.message_queue.topic, request.group)
        if request.auto_renew:
            invisible_ms = AUTO_RENEW_INVISIBLE_MS
        else:
            invisible_ms = _check_invisible_time(
                request.invisible_duration.ToMilliseconds(), MIN_RECEIVE_INVISIBLE_MS
            )
        subscription = _subscription(topic, request.filter_expression)
        route = await self._proxy.routes.route(topic)
        settings = await self._group_settings(group, route)
        brokers = _readable_brokers(route)
        if not brokers:
            raise Refusal(v2.FORBIDDEN, "no readable queue")
        broker_name = request.message_queue.broker.name
        if broker_name not in brokers:
            broker_name = brokers[next(self._next_broker) % len(brokers)]
        pop = pop_header(
            group,
            subscription,
            max(1, min(request.batch_size, MAX_POP_MESSAGES)),
            invisible_ms,
            polling_ms,
            order=settings.fifo,
            attempt_id=request.attempt_id if request.HasField("attempt_id") else None,
        )
        timeout = polling_ms / 1000 + self._brokers.request_timeout
        response = await self._invoke(broker_name, topic, RequestCode.POP_MESSAGE, pop.encode(), timeout)
        if response.code == ResponseCode.POLLING_FULL:
            raise Refusal(v2.TOO_MANY_REQUESTS, "polling full")
        try:
            messages = popped(response, broker_name)
        except BrokerError:
            raise _broker_refusal(response) from None
        except ProtocolError as exc:
            raise Refusal(v2.INTERNAL_SERVER_ERROR, str(exc)) from None
        delivered = await self._deliverable(
            group, topic, subscription, settings.retry_max_times + 1, messages
        )
        client_id = _client_id(context)
        if request.auto_renew and client_id:
            self._renew(client_id, group, topic, delivered)
        return delivered

    async def _deliverable(
        self,
        group: str,
        topic: str,
        subscription: SubscriptionData,
        max_attempts: int,
        messages: list[ReceivedMessage],
    ) -> list[v2.Message]:
        """The popped messages the client is to see. As RocketMQ's PopMessageResultFilterImpl: one of a
        tag the subscription does not name (the broker filters by tag hash, and two tags can share
        one: docs/protocol.md#tag-hash) is acked at once, and one past the group's attempts goes to
        the dead-letter queue."""
        delivered: list[v2.Message] = []
        settling = []
        for message in messages:
            if POP_CK not in message.properties:
                raise Refusal(
                    v2.INTERNAL_SERVER_ERROR, f"the broker popped message {message.msg_id} without a POP_CK"
                )
            if subscription.tags and message.tags not in subscription.tags:
                settling.append(self._ack(group, topic, _handle_of(message)))
            elif message.reconsume_times >= max_attempts:
                settling.append(self._to_dead_letter_queue(group, topic, _handle_of(message), message.msg_id))
            else:
                delivered.append(incoming_message(message))
        for outcome in await asyncio.gather(*settling, return_exceptions=True):
            if isinstance(outcome, BaseException):
                log.warning("settling a message of %s popped for %s failed: %s", topic, group, outcome)
        return delivered

    # renewal of auto-renew receives -------------------------------------------------------------------

    def _renew(self, client_id: str, group: str, topic: str, delivered: list[v2.Message]) -> None:
        """Keep *delivered* invisible while *client_id* is connected: a push consumer's receive names no
        invisible time, and its listener may take longer than the one it gets (RocketMQ proxy's
        ReceiptHandleProcessor)."""
        now = int(time.time() * 1000)
        for message in delivered:
            system = message.system_properties
            handle = parse_receipt_handle(system.receipt_handle)
            self._renewals[(client_id, group, system.message_id)] = _Renewal(topic, handle, now)
        if delivered and self._renewing is None:
            self._renewing = asyncio.ensure_future(self._renew_while_held())

    def _settled_by(self, client_id: str, group: str, message_id: str, receipt_handle: str) -> ExtraInfo:
        """The handle that settles a message a client names by *receipt_handle*: the latest renewal's when
        the proxy renews it (and no longer does, the client having taken it over), else the client's."""
        renewal = self._renewals.pop((client_id, group, message_id), None)
        if renewal is not None:
            return renewal.handle
        return parse_receipt_handle(receipt_handle)

    def _connected(self, client_id: str) -> bool:
        client = self._proxy.clients.known(client_id)
        return client is not None and client.outbox is not None  # its Telemetry stream is open

    async def _renew_while_held(self) -> None:
        """Every RENEW_PERIOD_S, renew what becomes visible soon; done when nothing is held."""
        try:
            while self._renewals:
                await asyncio.sleep(RENEW_PERIOD_S)
                now = int(time.time() * 1000)
                due = [
                    (key, renewal)
                    for key, renewal in self._renewals.items()
                    if renewal.handle.visible_at - now <= RENEW_AHEAD_MS
                ]
                for key, renewal in due:
                    await self._renew_one(key, renewal, now)
        finally:
            self._renewing = None

    async def _renew_one(self, key: tuple[str, str, str], renewal: _Renewal, now: int) -> None:
        client_id, group, message_id = key
        if not self._connected(client_id) or now - renewal.received_ms >= RENEW_MAX_MS:
            self._renewals.pop(key, None)  # it becomes visible in its time, for another consumer
            return
        try:
            renewed = await self._change(group, renewal.topic, renewal.handle, AUTO_RENEW_INVISIBLE_MS)
        except Refusal as refusal:
            if refusal.code == v2.INVALID_RECEIPT_HANDLE:
                self._renewals.pop(key, None)  # settled or delivered again meanwhile
            else:
                log.info(
                    "cannot renew message %s of %s for %s: %s",
                    message_id,
                    renewal.topic,
                    group,
                    refusal.message,
                )
            return
        except CometMQError as exc:
            log.info("cannot renew message %s of %s for %s: %s", message_id, renewal.topic, group, exc)
            return
        if self._renewals.get(key) is renewal:  # not settled while the change was on its way
            renewal.handle = renewed

    # AckMessage -------------------------------------------------------------------------------------

    async def ack_message(self, request: pb.AckMessageRequest, context: Context) -> pb.AckMessageResponse:
        return await respond(pb.AckMessageResponse, self._ack_message(request, context))

    async def _ack_message(self, request: pb.AckMessageRequest, context: Context) -> pb.AckMessageResponse:
        """One ACK_MESSAGE per entry, all at once; each entry's result in its own status, and the call's
        status the one code they share (MULTIPLE_RESULTS when they differ)."""
        topic, group = _topic_and_group(request.topic, request.group)
        if not request.entries:
            raise Refusal(v2.BAD_REQUEST, "the request acknowledges no message")
        client_id = _client_id(context)
        statuses = await asyncio.gather(
            *(self._ack_entry(client_id, group, topic, entry) for entry in request.entries)
        )
        entries = [
            pb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result
            )
            for entry, result in zip(request.entries, statuses, strict=True)
        ]
        if len({result.code for result in statuses}) > 1:
            return pb.AckMessageResponse(
                status=status(v2.MULTIPLE_RESULTS, "MULTIPLE_RESULTS"), entries=entries
            )
        return pb.AckMessageResponse(status=statuses[0], entries=entries)

    async def _ack_entry(
        self, client_id: str, group: str, topic: str, entry: pb.AckMessageEntry
    ) -> v2.Status:
        try:
            handle = self._settled_by(client_id, group, entry.message_id, entry.receipt_handle)
            check_live(handle)
            await self._ack(group, topic, handle)
        except Refusal as refusal:
            return status(refusal.code, refusal.message)
        return ok()

    async def _ack(self, group: str, topic: str, handle: ExtraInfo) -> None:
        ack = ack_header(group, topic, handle)
        await self._ask(handle.broker_name, topic, RequestCode.ACK_MESSAGE, ack.encode())

    # ChangeInvisibleDuration ------------------------------------------------------------------------

    async def change_invisible_duration(
        self, request: pb.ChangeInvisibleDurationRequest, context: Context
    ) -> pb.ChangeInvisibleDurationResponse:
        return await respond(
            pb.ChangeInvisibleDurationResponse, self._change_invisible_duration(request, context)
        )

    async def _change_invisible_duration(
        self, request: pb.ChangeInvisibleDurationRequest, context: Context
    ) -> pb.ChangeInvisibleDurationResponse:
        """CHANGE_MESSAGE_INVISIBLETIME; the answer carries the message's new receipt handle (the old
        one no longer settles it)."""
        topic, group = _topic_and_group(request.topic, request.group)
        invisible_ms = _check_invisible_time(request.invisible_duration.ToMilliseconds())
        handle = self._settled_by(_client_id(context), group, request.message_id, request.receipt_handle)
        check_live(handle)
        receipt_handle = str(await self._change(group, topic, handle, invisible_ms))
        return pb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=receipt_handle)

    async def _change(self, group: str, topic: str, handle: ExtraInfo, invisible_ms: int) -> ExtraInfo:
        """CHANGE_MESSAGE_INVISIBLETIME of the message *handle* names; its new handle."""
        change = change_invisible_header(group, topic, handle, invisible_ms)
        response = await self._ask(
            handle.broker_name, topic, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, change.encode()
        )
        return changed_handle(handle, decode_answer(ChangeInvisibleTimeResponseHeader, response))

    # ForwardMessageToDeadLetterQueue ----------------------------------------------------------------

    async def forward_message_to_dead_letter_queue(
        self, request: pb.ForwardMessageToDeadLetterQueueRequest, context: Context
    ) -> pb.ForwardMessageToDeadLetterQueueResponse:
        return await respond(pb.ForwardMessageToDeadLetterQueueResponse, self._forward(request, context))

    async def _forward(
        self, request: pb.ForwardMessageToDeadLetterQueueRequest, context: Context
    ) -> pb.ForwardMessageToDeadLetterQueueResponse:
        """The client gave up on a message (a FIFO consumer after its last attempt): it goes to the
        group's dead-letter queue, and its pop is acked."""
        topic, group = _topic_and_group(request.topic, request.group)
        handle = self._settled_by(_client_id(context), group, request.message_id, request.receipt_handle)
        await self._to_dead_letter_queue(group, topic, handle, request.message_id)
        return pb.ForwardMessageToDeadLetterQueueResponse(status=ok())

    async def _to_dead_letter_queue(self, group: str, topic: str, handle: ExtraInfo, message_id: str) -> None:
        if handle.commitlog_offset is None or handle.commitlog_offset < 0:
            raise Refusal(v2.INVALID_RECEIPT_HANDLE, "commit log offset is empty")
        send_back = ConsumerSendMsgBackRequestHeader(
            offset=handle.commitlog_offset,
            group=group,
            delay_level=-1,  # straight to %DLQ%<group>
            origin_msg_id=message_id or None,
            origin_topic=handle.real_topic(topic, group),
            max_reconsume_times=0,
        )
        await self._ask(handle.broker_name, topic, RequestCode.CONSUMER_SEND_MSG_BACK, send_back.encode())
        try:
            await self._ack(group, topic, handle)
        except Refusal as refusal:
            # The copy is in the dead-letter queue; the original, not acked, is revived once more and
            # forwarded again at its next delivery.
            log.warning(
                "cannot ack message %s of %s for %s after its forward to the DLQ: %s",
                message_id,
                topic,
                group,
                refusal.message,
            )

    # PullMessage, UpdateOffset, GetOffset, QueryOffset ----------------------------------------------

    async def _queue(self, queue: v2.MessageQueue) -> MessageQueue:
        """The queue a request names, its broker client from the topic's route."""
        check_topic(queue.topic.name)
        if queue.id < 0:
            raise Refusal(v2.BAD_REQUEST, f"queue id {queue.id} names no queue")
        if not self._brokers.knows_broker(queue.broker.name):
            await self._proxy.routes.route(queue.topic.name)
        if not self._brokers.knows_broker(queue.broker.name):
            raise Refusal(v2.BAD_REQUEST, f"no broker {queue.broker.name} serves topic {queue.topic.name}")
        return MessageQueue(queue.topic.name, queue.broker.name, queue.id)

    async def pull_message(
        self, request: pb.PullMessageRequest, context: Context
    ) -> AsyncIterator[pb.PullMessageResponse]:
        """A status, the messages from the offset on, then the offset to pull next. The group's offset
        is neither read nor committed (UpdateOffset commits it)."""
        try:
            result = await self._pull(request)
        except Refusal as refusal:
            yield pb.PullMessageResponse(status=status(refusal.code, refusal.message))
            return
        except CometMQError as exc:
            await self._brokers.refresh_route_if_unreachable(request.message_queue.topic.name, exc)
            yield pb.PullMessageResponse(status=status_of_error(exc))
            return
        if result.status is PullStatus.FOUND:
            yield pb.PullMessageResponse(status=ok())
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            yield pb.PullMessageResponse(
                status=status(v2.ILLEGAL_OFFSET, f"offset {request.offset} is outside the queue")
            )
        else:
            yield pb.PullMessageResponse(status=status(v2.MESSAGE_NOT_FOUND, "no new message"))
        for message in result.messages:
            yield pb.PullMessageResponse(message=incoming_message(message))
        yield pb.PullMessageResponse(next_offset=result.next_begin_offset)

    async def _pull(self, request: pb.PullMessageRequest) -> PullResult:
        check_group(request.group.name)
        queue = await self._queue(request.message_queue)
        if request.offset < 0:
            raise Refusal(v2.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        subscription = _subscription(queue.topic, request.filter_expression)
        suspend_ms = min(max(request.long_polling_timeout.ToMilliseconds(), 0), MAX_PULL_SUSPEND_MS)
        return await pull(
            self._brokers,
            queue,
            request.group.name,
            subscription,
            request.offset,
            max(1, min(request.batch_size, MAX_PULL_MESSAGES)),
            sys_flag=PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms else 0),
            suspend_ms=suspend_ms,
            timeout=suspend_ms / 1000 + self._brokers.request_timeout,
        )

    async def update_offset(
        self, request: pb.UpdateOffsetRequest, context: Context
    ) -> pb.UpdateOffsetResponse:
        return await respond(pb.UpdateOffsetResponse, self._update_offset(request))

    async def _update_offset(self, request: pb.UpdateOffsetRequest) -> pb.UpdateOffsetResponse:
        """The group's offset of the queue, stored as UPDATE_CONSUMER_OFFSET stores it."""
        check_group(request.group.name)
        queue = await self._queue(request.message_queue)
        if request.offset < 0:
            raise Refusal(v2.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        await commit_offset(self._brokers, queue, request.group.name, request.offset)
        return pb.UpdateOffsetResponse(status=ok())

    async def get_offset(self, request: pb.GetOffsetRequest, context: Context) -> pb.GetOffsetResponse:
        return await respond(pb.GetOffsetResponse, self._get_offset(request))

    async def _get_offset(self, request: pb.GetOffsetRequest) -> pb.GetOffsetResponse:
        """The group's offset of the queue; OFFSET_NOT_FOUND when the broker has none for it."""
        check_group(request.group.name)
        queue = await self._queue(request.message_queue)
        offset = await query_offset(self._brokers, queue, request.group.name)
        if offset is None:
            raise Refusal(v2.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset in {queue}")
        return pb.GetOffsetResponse(status=ok(), offset=offset)

    async def query_offset(self, request: pb.QueryOffsetRequest, context: Context) -> pb.QueryOffsetResponse:
        return await respond(pb.QueryOffsetResponse, self._query_offset(request))

    async def _query_offset(self, request: pb.QueryOffsetRequest) -> pb.QueryOffsetResponse:
        """The queue's first offset (BEGINNING), its next one (END), or the one stored nearest a time
        (TIMESTAMP), as GET_MIN_OFFSET, GET_MAX_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP answer."""
        queue = await self._queue(request.message_queue)
        policy = request.query_offset_policy
        if policy == v2.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise Refusal(v2.BAD_REQUEST, "a TIMESTAMP query names no timestamp")
            offset = await offset_for_timestamp(self._brokers, queue, request.timestamp.ToMilliseconds())
        elif policy == v2.END:
            offset = await max_offset(self._brokers, queue)
        else:
            offset = await min_offset(self._brokers, queue)
        return pb.QueryOffsetResponse(status=ok(), offset=offset)
