"""The proxy's producing calls: SendMessage (normal, FIFO, delayed, transactional half messages) and
EndTransaction, and the relay of the brokers' transaction check-backs to the clients.

A send goes to the queue the proxy picks (``Routes.select``) as SEND_MESSAGE_V2 (SEND_BATCH_MESSAGE for
several messages), under the producer group RocketMQ's proxy uses: the topic's name. A half message's
place (broker, queue offset in the half topic, commit-log offset) is remembered under its transaction id
(its message id, as RocketMQ's brokers answer it) until EndTransaction names it. A broker's
CHECK_TRANSACTION_STATE reaches the proxy as a member of that producer group; it goes on to one client
publishing the topic as a RecoverOrphanedTransactionCommand on its Telemetry stream, and the client's
EndTransaction (source SERVER_CHECK) goes back to the broker that asked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Final

from cometmq.client.instance import ClientInstance, decode_answer, send_header
from cometmq.client.message import ReceivedMessage
from cometmq.errors import CometMQError
from cometmq.protocol import RequestCode, ResponseCode
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.broker_headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    SendMessageResponseHeader,
)
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import decode_offset_msg_id
from cometmq.protocol.transaction import TransactionType
from cometmq.proxy._clients import Clients
from cometmq.proxy._convert import (
    MAX_BODY_SIZE,
    TIMER_DELIVER_MS,
    OutgoingMessage,
    Refusal,
    check_message_type,
    check_topic,
    incoming_message,
    outgoing_message,
)
from cometmq.proxy._pb import definition_pb2 as v2
from cometmq.proxy._pb import service_pb2 as pb
from cometmq.proxy._routes import Routes, WriteQueue
from cometmq.proxy._status import Context, code_of_response, ok, peer_address, status

log = logging.getLogger("cometmq.proxy")

# How long a half message's place is kept for its EndTransaction (RocketMQ proxy's
# transactionDataExpireMillis); the check-back settles one whose EndTransaction never came.
TRANSACTION_DATA_TTL_S: Final = 30.0
# The most messages one SendMessage may carry (the 5.x clients send one; a bound of this proxy's).
MAX_MESSAGES_PER_SEND: Final = 1024
# END_TRANSACTION's commitOrRollback for each v2 resolution.
_COMMIT_OR_ROLLBACK: Final = {
    v2.COMMIT: TransactionType.COMMIT,
    v2.ROLLBACK: TransactionType.ROLLBACK,
    v2.TRANSACTION_RESOLUTION_UNSPECIFIED: TransactionType.NOT_TYPE,
}


@dataclass(frozen=True, slots=True)
class _HalfMessage:
    broker_addr: str
    tran_state_table_offset: int
    commit_log_offset: int
    expires_at: float


class Producing:
    def __init__(self, brokers: ClientInstance, routes: Routes, clients: Clients) -> None:
        self._brokers = brokers
        self._routes = routes
        self._clients = clients
        self._halves: dict[tuple[str, str], _HalfMessage] = {}  # (topic, transaction id) → place
        # The published topics looked at: True for those registered as producer groups.
        self._check_groups: dict[str, bool] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        clients.on_publishers_changed(self._follow_publishers)

    # sends ---------------------------------------------------------------------------------

    async def send_message(self, request: pb.SendMessageRequest, context: Context) -> pb.SendMessageResponse:
        if not request.messages:
            raise Refusal(v2.MESSAGE_CORRUPTED, "no message to send")
        topic = request.messages[0].topic.name
        check_topic(topic)
        if any(message.topic.name != topic for message in request.messages):
            raise Refusal(v2.MESSAGE_CORRUPTED, "the messages of one send must all be of one topic")
        if len(request.messages) > MAX_MESSAGES_PER_SEND:
            raise Refusal(
                v2.BAD_REQUEST,
                f"{len(request.messages)} messages in one send, over the max {MAX_MESSAGES_PER_SEND}",
            )
        peer = peer_address(context)
        outgoing: list[OutgoingMessage] = []
        body_bytes = 0
        for message in request.messages:
            outgoing.append(outgoing_message(message, topic, peer))
            body_bytes += len(outgoing[-1].body)
            if body_bytes > MAX_BODY_SIZE:  # the most a broker takes in one batch (maxMessageSize)
                raise Refusal(
                    v2.MESSAGE_BODY_TOO_LARGE,
                    f"the bodies of one send take more than the max {MAX_BODY_SIZE} bytes",
                )
        route = await self._routes.route(topic)
        topic_type = await self._routes.message_type(topic, route)
        for message in outgoing:
            check_message_type(topic, topic_type, message.message_type)
        queues = self._routes.write_queues(topic, route)
        if not queues:
            raise Refusal(v2.FORBIDDEN, f"topic {topic} has no writable queue")
        # RocketMQ's proxy places a send of several messages by none's group.
        queue = self._routes.select(queues, outgoing[0].message_group if len(outgoing) == 1 else "")
        try:
            # A broker keeps the messages of a batch as they come, delivery times or not (RocketMQ's
            # too): messages with one are sent one by one. The 5.x clients send one message a call.
            if len(outgoing) == 1 or any(TIMER_DELIVER_MS in message.properties for message in outgoing):
                entries = [await self._send_one(topic, queue, message) for message in outgoing]
            else:
                entries = await self._send_batch(topic, queue, outgoing)
        except CometMQError as exc:
            # A broker gone: the client's retry (its backoff policy) finds the route without it.
            await self._brokers.refresh_route_if_unreachable(topic, exc)
            raise
        overall = entries[0].status
        if len({entry.status.code for entry in entries}) > 1:
            overall = status(v2.MULTIPLE_RESULTS, "MULTIPLE_RESULTS")
        return pb.SendMessageResponse(status=overall, entries=entries)

    async def _send_one(self, topic: str, queue: WriteQueue, message: OutgoingMessage) -> pb.SendResultEntry:
        header = send_header(topic, topic, encode_properties(message.properties), sys_flag=message.sys_flag)
        header.queue_id = queue.queue_id
        if message.born_timestamp_ms > 0:
            header.born_timestamp = message.born_timestamp_ms
        response = await self._brokers.invoke(
            queue.addr, RequestCode.SEND_MESSAGE_V2, header.encode(compact=True), message.body
        )
        if response.code != ResponseCode.SUCCESS:
            code = code_of_response(response.code)
            if response.code == ResponseCode.MESSAGE_ILLEGAL and TIMER_DELIVER_MS in message.properties:
                code = v2.ILLEGAL_DELIVERY_TIME  # a delivery time beyond the broker's timerMaxDelaySec
            return pb.SendResultEntry(status=status(code, response.remark or ""))
        answer = decode_answer(SendMessageResponseHeader, response)
        transaction_id = ""
        if message.sys_flag == TransactionType.PREPARED:
            transaction_id = answer.transaction_id or message.message_id
            self._remember_half(topic, transaction_id, queue.addr, answer.queue_offset, answer.msg_id)
            if not self._check_groups.get(topic):  # a topic created after its producers connected
                self._register_check_group(topic)
                self._spawn(self._announce_groups())
        return pb.SendResultEntry(
            status=ok(),
            message_id=message.message_id,
            transaction_id=transaction_id,
            offset=answer.queue_offset,
        )

    async def _send_batch(
        self, topic: str, queue: WriteQueue, messages: list[OutgoingMessage]
    ) -> list[pb.SendResultEntry]:
        if any(message.sys_flag for message in messages):
            raise Refusal(v2.BAD_REQUEST, "transactional messages are sent one by one, not in a batch")
        body = encode_batch_body(
            [BatchEntry(0, message.body, encode_properties(message.properties)) for message in messages]
        )
        header = send_header(topic, topic, "", batch=True)
        header.queue_id = queue.queue_id
        response = await self._brokers.invoke(
            queue.addr, RequestCode.SEND_BATCH_MESSAGE, header.encode(compact=True), body
        )
        if response.code != ResponseCode.SUCCESS:
            failed = status(code_of_response(response.code), response.remark or "")
            return [pb.SendResultEntry(status=failed) for _ in messages]
        answer = decode_answer(SendMessageResponseHeader, response)
        return [
            pb.SendResultEntry(status=ok(), message_id=message.message_id, offset=answer.queue_offset + index)
            for index, message in enumerate(messages)
        ]

    # transactions --------------------------------------------------------------------------

    def _remember_half(
        self, topic: str, transaction_id: str, broker_addr: str, queue_offset: int, offset_msg_id: str
    ) -> None:
        try:
            commit_log_offset = decode_offset_msg_id(offset_msg_id)[2]
        except ValueError:
            log.warning(
                "the broker at %s answered a half message with no offset id: %r", broker_addr, offset_msg_id
            )
            return
        self._remember((topic, transaction_id), broker_addr, queue_offset, commit_log_offset)

    def _remember(
        self, key: tuple[str, str], broker_addr: str, tran_state_table_offset: int, commit_log_offset: int
    ) -> None:
        """Keep a half message's place for TRANSACTION_DATA_TTL_S. The places stay in the order they
        expire in (one TTL for all, a place remembered again moves to the end), so forgetting the
        expired ones looks at no more than those and the first one still valid."""
        now = time.monotonic()
        halves = self._halves
        while halves:
            first = next(iter(halves))
            if halves[first].expires_at > now:
                break
            del halves[first]
        halves.pop(key, None)
        halves[key] = _HalfMessage(
            broker_addr, tran_state_table_offset, commit_log_offset, now + TRANSACTION_DATA_TTL_S
        )

    async def end_transaction(
        self, request: pb.EndTransactionRequest, context: Context
    ) -> pb.EndTransactionResponse:
        topic = request.topic.name
        check_topic(topic)
        if not request.transaction_id:
            raise Refusal(v2.INVALID_TRANSACTION_ID, "the transaction id is empty")
        half = self._halves.pop((topic, request.transaction_id), None)
        if half is None or half.expires_at <= time.monotonic():
            raise Refusal(
                v2.INVALID_TRANSACTION_ID,
                f"no half message of transaction {request.transaction_id} on topic {topic} waits for its end "
                "here (unknown, ended already, or older than the check-back's first check)",
            )
        header = EndTransactionRequestHeader(
            producer_group=topic,
            tran_state_table_offset=half.tran_state_table_offset,
            commit_log_offset=half.commit_log_offset,
            commit_or_rollback=_COMMIT_OR_ROLLBACK.get(request.resolution, TransactionType.NOT_TYPE),
            from_transaction_check=request.source == v2.SOURCE_SERVER_CHECK,
            msg_id=request.message_id,
            transaction_id=request.transaction_id,
            topic=topic,
        )
        response = await self._brokers.invoke(half.broker_addr, RequestCode.END_TRANSACTION, header.encode())
        if response.code != ResponseCode.SUCCESS:
            return pb.EndTransactionResponse(
                status=status(
                    code_of_response(response.code), response.remark or "the broker refused the end"
                )
            )
        return pb.EndTransactionResponse(status=ok())

    def _follow_publishers(self) -> None:
        """Keep a producer group, for the brokers' check-backs, for each published topic that takes
        transactional messages (TRANSACTION or MIXED, as RocketMQ's producers register them), while any
        client publishes it. Other topics are not registered: a heartbeat names at most 256 groups."""
        published = self._clients.published_topics()
        dropped = [topic for topic in self._check_groups if topic not in published]
        unregistered = [topic for topic in dropped if self._check_groups.pop(topic)]
        for topic in unregistered:
            self._brokers.unregister_transaction_member(topic)
        if unregistered:
            self._spawn(self._brokers.unregister_groups(producer_groups=unregistered))
        new_topics = [topic for topic in published if topic not in self._check_groups]
        for topic in new_topics:
            self._check_groups[topic] = False
        if new_topics:
            self._spawn(self._register_check_groups(new_topics))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _register_check_groups(self, topics: list[str]) -> None:
        registered = False
        for topic in topics:
            try:
                topic_type = await self._routes.message_type(topic, await self._routes.route(topic))
            except Refusal:
                continue  # no such topic yet: registered by its first half message (_send_one)
            # A topic whose type cannot be read may take transactional messages.
            if topic in self._check_groups and topic_type in (None, "TRANSACTION", "MIXED"):
                self._register_check_group(topic)
                registered = True
        if registered:
            await self._announce_groups()

    def _register_check_group(self, topic: str) -> None:
        self._check_groups[topic] = True
        self._brokers.register_transaction_member(_CheckRelay(topic, self))

    async def _announce_groups(self) -> None:
        """A broker checks back only the members of a group it heard from: tell every broker now."""
        await self._brokers.learn_brokers()
        await self._brokers.send_heartbeat()

    def relay_check(
        self,
        topic: str,
        broker_addr: str,
        request: CheckTransactionStateRequestHeader,
        message: ReceivedMessage,
    ) -> None:
        transaction_id = request.transaction_id or message.transaction_id
        connected = self._clients.producer_streams(topic)
        if not connected:
            log.debug("no client publishing %s is connected to check transaction %s", topic, transaction_id)
            return
        self._remember(
            (topic, transaction_id), broker_addr, request.tran_state_table_offset, request.commit_log_offset
        )
        command = pb.TelemetryCommand(
            recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
                message=incoming_message(message), transaction_id=transaction_id
            )
        )
        if not self._clients.send_to_one(connected, command):
            log.debug("no client publishing %s takes the check of transaction %s now", topic, transaction_id)


class _CheckRelay:
    """The proxy as a member of a producer group (a topic's name), for the brokers' check-backs."""

    def __init__(self, group: str, producing: Producing) -> None:
        self.group = group
        self._producing = producing

    def check_transaction_state(
        self, broker_addr: str, request: CheckTransactionStateRequestHeader, message: ReceivedMessage
    ) -> None:
        try:
            self._producing.relay_check(self.group, broker_addr, request, message)
        except CometMQError as exc:
            log.warning("cannot relay the check of a half message of %s: %s", self.group, exc)
