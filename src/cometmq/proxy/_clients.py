"""The 5.x clients connected to the proxy: their settings, their Telemetry streams, their heartbeats.

A client is client by its id (gRPC metadata ``x-mq-client-id``, sent with every call). Its first Telemetry
command carries its settings (a producer's topics, a consumer's group and subscriptions); the proxy
answers with the settings the client is to use, merged as RocketMQ's proxy merges them
(GrpcClientSettingsManager): the retry policy, the body size limit, the group's FIFO flag and attempts.
The stream stays open for the proxy's commands to the client (RecoverOrphanedTransactionCommand).
Consumer groups are registered with the brokers through the proxy's own heartbeats while a client of
theirs is connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import grpc

from cometmq.auth import Need
from cometmq.broker.sql92 import compile_sql92
from cometmq.client.instance import ClientInstance
from cometmq.client.message import MessageQueue
from cometmq.errors import Sql92Error
from cometmq.protocol.jsonbody import MAX_HEARTBEAT_SUBSCRIPTIONS
from cometmq.protocol.naming import SYSTEM_GROUPS, group_name_error
from cometmq.protocol.subscription import EXPRESSION_TAG, SubscriptionData
from cometmq.proxy._access import PUB, Authorizer, consuming, on_topic
from cometmq.proxy._convert import MAX_BODY_SIZE, Refusal, check_topic, duration_of_ms
from cometmq.proxy._metadata import GroupSettings, Metadata
from cometmq.proxy._pb import definition_pb2 as v2
from cometmq.proxy._pb import service_pb2 as pb
from cometmq.proxy._routes import Routes
from cometmq.proxy._status import Context, ok, status

log = logging.getLogger("cometmq.proxy")

CLIENT_ID_KEY: Final = "x-mq-client-id"
# The gRPC status a Telemetry stream is ended with for a refused settings command (INVALID_ARGUMENT else).
_ABORT_CODES: Final[dict[int, Any]] = {v2.UNAUTHORIZED: grpc.StatusCode.PERMISSION_DENIED}
# The most commands waiting to be written to one client's Telemetry stream: a client that stops reading
# it is given no more (a transaction check not passed on is asked again by the broker).
OUTBOX_COMMANDS: Final = 1024
# How often the idle clients are looked for, at most.
SWEEP_INTERVAL_S: Final = 10.0
# The most topics one client's settings may name, and the most topics one consumer group's clients may
# subscribe together: the brokers refuse a heartbeat whose group subscribes more.
MAX_SETTINGS_TOPICS: Final = MAX_HEARTBEAT_SUBSCRIPTIONS
MAX_GROUP_SUBSCRIPTIONS: Final = MAX_HEARTBEAT_SUBSCRIPTIONS

# RocketMQ proxy's defaults (ProxyConfig) for what it tells the clients.
PRODUCER_MAX_ATTEMPTS: Final = 3
PRODUCER_BACKOFF_INITIAL_MS: Final = 10
PRODUCER_BACKOFF_MAX_MS: Final = 1000
PRODUCER_BACKOFF_MULTIPLIER: Final = 2.0
CONSUMER_RECEIVE_BATCH_SIZE: Final = 32
CONSUMER_LONG_POLLING_TIMEOUT_MS: Final = 20_000
# A consumer's redelivery delays, attempt by attempt (RocketMQ's CustomizedRetryPolicy default): 1 s, 5 s,
# 10 s, 30 s, 1 to 10 min, 20 min, 30 min, 1 h, 2 h.
CONSUMER_BACKOFF_MS: Final = (
    1_000, 5_000, 10_000, 30_000, *(minutes * 60_000 for minutes in range(1, 11)),
    1_200_000, 1_800_000, 3_600_000, 7_200_000,
)  # fmt: skip


def client_id_of(context: Context) -> str:
    """The calling client's id; CLIENT_ID_REQUIRED without one."""
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_KEY and value:
            return str(value)
    raise Refusal(v2.CLIENT_ID_REQUIRED, f"the call carries no client id (gRPC metadata {CLIENT_ID_KEY})")


def check_group(group: str) -> None:
    """ILLEGAL_CONSUMER_GROUP for a name no group may have, or a system group."""
    problem = group_name_error(group)
    if problem is not None:
        raise Refusal(v2.ILLEGAL_CONSUMER_GROUP, f"group {group!r}: {problem}")
    if group in SYSTEM_GROUPS:
        raise Refusal(v2.ILLEGAL_CONSUMER_GROUP, f"group {group!r} is a system group clients may not use")


def settings_needs(settings: v2.Settings) -> list[Need]:
    """What a client's settings say it will do: publish to its topics, or consume its subscriptions."""
    if settings.HasField("publishing"):
        return [on_topic(topic.name, PUB) for topic in settings.publishing.topics]
    group = settings.subscription.group.name
    return [
        need for entry in settings.subscription.subscriptions for need in consuming(entry.topic.name, group)
    ]


def check_filter(entry: v2.SubscriptionEntry) -> None:
    """ILLEGAL_FILTER_EXPRESSION for a filter the brokers would refuse: one SQL92 expression they cannot
    compile would make them refuse the heartbeat naming it, and with it every other group it names."""
    expression = entry.expression
    if expression.type == v2.SQL:
        try:
            compile_sql92(expression.expression)
        except Sql92Error as exc:
            raise Refusal(
                v2.ILLEGAL_FILTER_EXPRESSION,
                f"the SQL92 filter of topic {entry.topic.name} does not compile: {exc}",
            ) from None
    elif expression.type != v2.TAG:
        raise Refusal(v2.ILLEGAL_FILTER_EXPRESSION, f"filter type {expression.type} is neither TAG nor SQL")


def _group_of(settings: v2.Settings) -> str:
    return settings.subscription.group.name if settings.HasField("subscription") else ""


def subscription_data(entry: v2.SubscriptionEntry) -> SubscriptionData:
    """A 5.x subscription as a 4.x heartbeat carries it."""
    kind = "SQL92" if entry.expression.type == v2.SQL else EXPRESSION_TAG
    return SubscriptionData.from_expression(entry.topic.name, entry.expression.expression, kind)


@dataclass(eq=False)
class ConnectedClient:
    client_id: str
    settings: v2.Settings
    # The open Telemetry stream's commands to the client, written in order by the stream's writer.
    outbox: asyncio.Queue[pb.TelemetryCommand] | None = None
    last_seen: float = field(default_factory=time.monotonic)

    @property
    def group(self) -> str:
        return _group_of(self.settings)

    @property
    def topics(self) -> list[str]:
        return [topic.name for topic in self.settings.publishing.topics]


@dataclass(eq=False)
class _ConsumerGroup:
    """A consumer group as the proxy's heartbeats register it with the brokers (ConsumerMember)."""

    group: str
    consume_type: str
    # The members' client ids, each with the topics it subscribes; the group subscribes them all.
    members: dict[str, list[v2.SubscriptionEntry]] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def topics_without(self, client_id: str) -> set[str]:
        """The topics the other members subscribe."""
        return {
            entry.topic.name
            for member, entries in self.members.items()
            if member != client_id
            for entry in entries
        }

    def resubscribe(self) -> None:
        """Subscribe what the members subscribe, and no more (a member gone or resubscribed leaves
        nothing behind)."""
        self.subscriptions = {
            entry.topic.name: subscription_data(entry)
            for entries in self.members.values()
            for entry in entries
        }

    def consumer_data(self) -> dict[str, Any]:
        return {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [sub.to_json() for sub in self.subscriptions.values()],
            "unitMode": False,
        }

    def on_ids_changed(self) -> None:
        pass  # the brokers assign nothing to 5.x consumers: they pop

    def on_reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        pass  # popped queues continue from the group's offsets on the broker

    def running_info(self) -> dict[str, Any]:
        return {"properties": {"consumeType": self.consume_type, "messageModel": "CLUSTERING"}}


class Clients:
    def __init__(
        self,
        brokers: ClientInstance,
        metadata: Metadata,
        routes: Routes,
        authorizer: Authorizer,
        idle_s: float,
    ) -> None:
        self._brokers = brokers
        self._authorizer = authorizer
        self._metadata = metadata
        self._routes = routes
        self._connected: dict[str, ConnectedClient] = {}
        self._groups: dict[str, _ConsumerGroup] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle_s = idle_s
        self._sweeper: asyncio.Task[None] | None = None
        self._publishers_changed: list[Callable[[], None]] = []

    def on_publishers_changed(self, callback: Callable[[], None]) -> None:
        """Call *callback* whenever the topics the clients publish may have changed."""
        self._publishers_changed.append(callback)

    def published_topics(self) -> set[str]:
        """The topics any known client publishes."""
        return {topic for client in self._connected.values() for topic in client.topics}

    def _publishers_may_have_changed(self) -> None:
        for callback in self._publishers_changed:
            callback()

    def known(self, client_id: str) -> ConnectedClient | None:
        return self._connected.get(client_id)

    def producer_streams(self, topic: str) -> list[ConnectedClient]:
        """The clients with an open Telemetry stream that publish to *topic*."""
        return [s for s in self._connected.values() if s.outbox is not None and topic in s.topics]

    def send_to_one(self, connected: list[ConnectedClient], command: pb.TelemetryCommand) -> bool:
        """Write *command* to one of *connected* (chosen at random, spreading the checks) whose stream
        takes more; whether any did."""
        open_outboxes = [s.outbox for s in connected if s.outbox is not None and not s.outbox.full()]
        if not open_outboxes:
            return False
        random.choice(open_outboxes).put_nowait(command)
        return True

    # settings ------------------------------------------------------------------------------

    async def merged_settings(self, settings: v2.Settings) -> v2.Settings:
        """The settings a client is told to use, from the ones it sent (RocketMQ proxy's merge)."""
        merged = v2.Settings()
        merged.CopyFrom(settings)
        if settings.HasField("publishing"):
            merged.backoff_policy.CopyFrom(
                v2.RetryPolicy(
                    max_attempts=PRODUCER_MAX_ATTEMPTS,
                    exponential_backoff=v2.ExponentialBackoff(
                        initial=duration_of_ms(PRODUCER_BACKOFF_INITIAL_MS),
                        max=duration_of_ms(PRODUCER_BACKOFF_MAX_MS),
                        multiplier=PRODUCER_BACKOFF_MULTIPLIER,
                    ),
                )
            )
            merged.publishing.validate_message_type = True
            merged.publishing.max_body_size = MAX_BODY_SIZE
        elif settings.HasField("subscription"):
            group = await self.group_settings(settings.subscription)
            merged.subscription.receive_batch_size = CONSUMER_RECEIVE_BATCH_SIZE
            merged.subscription.long_polling_timeout.CopyFrom(
                duration_of_ms(CONSUMER_LONG_POLLING_TIMEOUT_MS)
            )
            merged.subscription.fifo = group.fifo
            merged.backoff_policy.CopyFrom(
                v2.RetryPolicy(
                    max_attempts=group.retry_max_times + 1,
                    customized_backoff=v2.CustomizedBackoff(
                        next=[duration_of_ms(ms) for ms in CONSUMER_BACKOFF_MS]
                    ),
                )
            )
        merged.metric.CopyFrom(v2.Metric(on=False))
        return merged

    async def group_settings(self, subscription: v2.Subscription) -> GroupSettings:
        """The settings of a subscription's group, read from the masters of its topics."""
        masters: list[str] = []
        for entry in subscription.subscriptions:
            with contextlib.suppress(Refusal):
                masters += self._routes.master_addrs(await self._routes.route(entry.topic.name))
        return await self._metadata.group_settings(subscription.group.name, sorted(set(masters)))

    def _check(self, client_id: str, settings: v2.Settings) -> None:
        if settings.HasField("publishing"):
            _check_topic_count(len(settings.publishing.topics))
            for topic in settings.publishing.topics:
                check_topic(topic.name)
        elif settings.HasField("subscription"):
            group = settings.subscription.group.name
            check_group(group)
            _check_topic_count(len(settings.subscription.subscriptions))
            for entry in settings.subscription.subscriptions:
                check_topic(entry.topic.name)
                check_filter(entry)
            joined = self._groups.get(group)
            topics = joined.topics_without(client_id) if joined is not None else set()
            topics.update(entry.topic.name for entry in settings.subscription.subscriptions)
            if len(topics) > MAX_GROUP_SUBSCRIPTIONS:
                raise Refusal(
                    v2.BAD_REQUEST,
                    f"group {group}'s clients would subscribe {len(topics)} topics, over the max "
                    f"{MAX_GROUP_SUBSCRIPTIONS}",
                )
        else:
            raise Refusal(v2.BAD_REQUEST, "there is no publishing or subscription data in settings")

    def _update(self, client_id: str, settings: v2.Settings) -> ConnectedClient:
        client = self._connected.get(client_id)
        if client is None:
            client = self._connected[client_id] = ConnectedClient(client_id, settings)
        else:
            if client.group != _group_of(settings):  # the same group keeps its registration
                self._leave_group(client)
            client.settings = settings
        if settings.HasField("subscription"):
            self._join_group(client)
        self._publishers_may_have_changed()
        return client

    # the calls -----------------------------------------------------------------------------

    async def telemetry(
        self,
        requests: AsyncIterator[pb.TelemetryCommand],
        context: Context,
    ) -> None:
        """Serve one Telemetry stream until the client closes it: settings in, settings out, and any
        command the proxy has for the client meanwhile."""
        try:
            client_id = client_id_of(context)
        except Refusal as refusal:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal.message)
        outbox: asyncio.Queue[pb.TelemetryCommand] = asyncio.Queue(OUTBOX_COMMANDS)
        writer = asyncio.create_task(self._write(outbox, context))
        client: ConnectedClient | None = None
        try:
            async for command in requests:
                if command.WhichOneof("command") != "settings":
                    continue  # thread stack traces and verify results: the proxy asks for neither
                try:
                    self._check(client_id, command.settings)
                    self._authorizer.check(context, settings_needs(command.settings))
                except Refusal as refusal:
                    code = _ABORT_CODES.get(refusal.code, grpc.StatusCode.INVALID_ARGUMENT)
                    await context.abort(code, refusal.message)
                client = self._update(client_id, command.settings)
                client.outbox = outbox
                merged = await self.merged_settings(command.settings)
                await outbox.put(pb.TelemetryCommand(status=ok(), settings=merged))
            # The client closed its side: what is queued for it still goes out, unless writing fails.
            flushed = asyncio.ensure_future(outbox.join())
            await asyncio.wait({flushed, writer}, return_when=asyncio.FIRST_COMPLETED)
            flushed.cancel()
        finally:
            if client is not None and client.outbox is outbox:
                client.outbox = None
                client.last_seen = time.monotonic()
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    @staticmethod
    async def _write(outbox: asyncio.Queue[pb.TelemetryCommand], context: Context) -> None:
        while True:
            command = await outbox.get()
            try:
                await context.write(command)
            finally:
                outbox.task_done()

    async def heartbeat(self, request: pb.HeartbeatRequest, context: Context) -> pb.HeartbeatResponse:
        client = self._connected.get(client_id_of(context))
        if client is None:
            return pb.HeartbeatResponse(
                status=status(v2.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")
            )
        client.last_seen = time.monotonic()
        if client.settings.HasField("subscription"):
            check_group(request.group.name)
        return pb.HeartbeatResponse(status=ok())

    def start(self) -> None:
        """Forget idle clients from now on (a client killed never says goodbye)."""
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(min(SWEEP_INTERVAL_S, self._idle_s / 2))
            self._forget_idle()

    def _forget_idle(self) -> None:
        now = time.monotonic()
        idle = [s for s in self._connected.values() if s.outbox is None and now - s.last_seen > self._idle_s]
        for client in idle:
            del self._connected[client.client_id]
            self._leave_group(client)
        if idle:
            self._publishers_may_have_changed()

    async def notify_client_termination(
        self, request: pb.NotifyClientTerminationRequest, context: Context
    ) -> pb.NotifyClientTerminationResponse:
        client = self._connected.pop(client_id_of(context), None)
        if client is None:
            return pb.NotifyClientTerminationResponse(
                status=status(v2.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")
            )
        self._leave_group(client)
        self._publishers_may_have_changed()
        return pb.NotifyClientTerminationResponse(status=ok())

    # consumer groups on the brokers --------------------------------------------------------

    def _join_group(self, client: ConnectedClient) -> None:
        settings = client.settings
        group = self._groups.get(client.group)
        if group is None:
            consume_type = (
                "CONSUME_PASSIVELY" if settings.client_type == v2.PUSH_CONSUMER else "CONSUME_ACTIVELY"
            )
            group = self._groups[client.group] = _ConsumerGroup(client.group, consume_type)
            self._brokers.register_consumer(group)
        group.members[client.client_id] = list(settings.subscription.subscriptions)
        group.resubscribe()
        self._spawn(self._announce(list(group.subscriptions)))

    async def _announce(self, topics: list[str]) -> None:
        """Heartbeat the brokers of *topics* now, rather than at the next round, so that a group's
        consumers are listed from the start."""
        for topic in topics:
            with contextlib.suppress(Refusal):
                await self._routes.route(topic)  # the brokers a heartbeat goes to are the routes' ones
        await self._brokers.send_heartbeat()

    def _leave_group(self, client: ConnectedClient) -> None:
        group = self._groups.get(client.group)
        if group is None:
            return
        group.members.pop(client.client_id, None)
        group.resubscribe()
        if not group.members:
            del self._groups[client.group]
            self._brokers.unregister_consumer(client.group)
            self._spawn(self._brokers.unregister_groups(consumer_groups=[client.group]))

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _check_topic_count(count: int) -> None:
    if count > MAX_SETTINGS_TOPICS:
        raise Refusal(v2.BAD_REQUEST, f"the settings name {count} topics, over the max {MAX_SETTINGS_TOPICS}")
