"""The asyncio-native Producer: send messages to a CometMQ (or RocketMQ 4.x) cluster.

What it does per send is what RocketMQ's DefaultMQProducer does: validate the message, give it a
client unique id (UNIQ_KEY), zlib-compress a large body, pick a queue round robin while avoiding
brokers that were slow or failed (:mod:`cometmq.client._fault`), send SEND_MESSAGE_V2 with the
one-letter header, and on a connection error, a timeout or a broker error RocketMQ retries, try again
on another broker within the send timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, NamedTuple

from cometmq.auth import Credentials
from cometmq.client._brokerapi import broker_addr_of, send_header
from cometmq.client._direct import DirectLane
from cometmq.client._fault import FaultStrategy, PublishInfo
from cometmq.client._instance import (
    POLL_NAMESRV_INTERVAL_RANGE_S,
    POLL_NAMESRV_INTERVAL_S,
    ClientInstance,
    decode_answer,
)
from cometmq.client._lifecycle import RUNNING, Client
from cometmq.client._msgid import UniqueIdGenerator
from cometmq.client._options import check_credentials, check_group, check_positive, check_range, tls_context
from cometmq.client._trace import TraceDispatcher, now_ms, trace_group
from cometmq.client.message import SYSFLAG_COMPRESSED, Message, MessageQueue, SendResult, SendStatus
from cometmq.errors import (
    BrokerError,
    ClientStateError,
    CometMQError,
    ConnectionClosedError,
    InvalidMessageError,
    MessageTooLargeError,
    NoRouteError,
    OptionError,
    QueueNotRoutedError,
    RemotingTimeoutError,
    ResponseLostError,
)
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.batch import ENTRY_HEAD, PROPERTIES_LENGTH
from cometmq.protocol.broker_headers import SendMessageRequestHeader, SendMessageResponseHeader
from cometmq.protocol.naming import (
    DEFAULT_TOPIC,
    GROUP_MAX_LENGTH,
    RETRY_GROUP_TOPIC_PREFIX,
    SEND_FORBIDDEN_TOPICS,
    topic_name_error,
)
from cometmq.protocol.record import MAX_PROPERTIES_SIZE
from cometmq.protocol.route import TopicRouteData
from cometmq.protocol.taghash import java_string_hash
from cometmq.protocol.trace import DEFAULT_REGION, MessageType
from cometmq.remoting import CLIENT_LIMIT_US, MAX_LIMIT_US

__all__ = [
    "Producer",
    "QueueSelector",
    "SendCallback",
    "select_by_hash",
]

log = logging.getLogger("cometmq.client")

ZLIB_LEVEL = 5  # Java and C++ compress at level 5 (stream header 78 5E)

# Property names RocketMQ reserves (MessageConst.STRING_HASH_SET): set them through Message's fields,
# not through ``properties``. UNIQ_KEY is allowed: a message resent with its id keeps it.
RESERVED_PROPERTIES = frozenset(
    {
        "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC",
        "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
        "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
    }
)  # fmt: skip

# A send's first attempt, written before its task starts (or made on the caller's thread, by the
# blocking facade): the queue, when (monotonic), the reply to come.
_Written = tuple[MessageQueue, float, Awaitable[RemotingCommand]]


class _Request(NamedTuple):
    """A send's request before its queue is chosen (shared by its attempts)."""

    code: int  # SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE
    topic: str
    header: SendMessageRequestHeader
    body: bytes | list[bytes]  # a batch body as its parts, written without a join
    uniq: str  # UNIQ_KEY, or a batch's joined by ","


# Failures after the request was written: the broker may have stored the message.
_OUTCOME_UNKNOWN = (RemotingTimeoutError, ResponseLostError)
# DefaultMQProducer.retryResponseCodes (4.9.8): broker answers worth another attempt on another broker.
# 204/205 are NO_BUYER_ID / NOT_IN_CURRENT_UNIT (unit mode), which the broker never sends here.
RETRY_RESPONSE_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.NO_PERMISSION,
        204,
        205,
    }
)

# Response codes of a stored message (processSendResponse): anything else is a failure.
_SEND_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}

_BATCH_FIXED = ENTRY_HEAD.size + PROPERTIES_LENGTH.size
_UNIQ_PREFIX = "UNIQ_KEY\x01"

# Picks a sharding key's queue from a topic's writable queues (in route order: by broker name, then
# queue id), as RocketMQ's MessageQueueSelector does with its ``arg``.
QueueSelector = Callable[[Sequence[MessageQueue], str], MessageQueue]
SendCallback = Callable[[SendResult | BaseException], object]


class Producer(Client):
    """Sends messages; one per producer group and process is the usual shape.

    ::

        async with Producer("PID_orders", "127.0.0.1:9876") as producer:
            result = await producer.send(Message("Orders", b'{"id": 1}', tags="created", keys="order-1"))

    ``send_timeout`` (seconds) bounds a whole send, retries included; ``retry_times`` is how many more
    attempts a failed send gets, each on another broker when there is one (RocketMQ's
    retryTimesWhenSendFailed). An attempt whose outcome is unknown (its request was written, then no
    answer came: a timeout, or the connection lost) is first made once more on the same queue, with
    the same UNIQ_KEY: a broker that deduplicates the topic (``+deduplication=true``) then answers with
    the copy it stored already, and the message is stored once. For that, an attempt with another one
    allowed after it waits at most half the time left (a callback send's first attempt, and the
    blocking producer's, wait the whole timeout). Bodies of ``compress_over`` bytes or more are
    zlib-compressed (RocketMQ's compressMsgBodyOverHowmuch, ``>=`` as in RocketMQ).
    ``max_message_size`` caps a body (uncompressed) and a whole batch. ``fault_avoidance`` keeps sends
    away from brokers that were slow or failed for a while (RocketMQ's sendLatencyFaultEnable, which is
    off by default there and on here).
    ``queue_selector`` picks the queue of a ``sharding_key`` from the topic's writable queues;
    :func:`select_by_hash`, the default, picks it as RocketMQ's Java SelectMessageQueueByHash does, so
    Java and Python producers put a key on the same queue. ``busy_poll_us`` > 0 keeps the event loop
    (and a blocking send's socket) polling after each request or response instead of sleeping, for a
    window that adapts to how soon replies come, at most that many µs, and closes when traffic stops
    (:mod:`cometmq.remoting.busypoll`); ``busy_poll_adaptive=False`` polls the whole ``busy_poll_us``
    every time; 0 never polls. Quicker replies, for a CPU kept busy while they keep coming.
    ``poll_name_server_interval`` is how often (seconds) the routes are looked up again, which is how
    the producer learns that a broker group's master left or came back (RocketMQ's
    pollNameServerInterval); a send that fails on a broker that cannot be reached or answers
    SERVICE_NOT_AVAILABLE looks its topic's route up at once, so that after a failover the producer
    finds the new master within a second of its registration.
    ``credentials`` (:class:`cometmq.auth.Credentials`) sign every request, for servers with aclEnable;
    ``tls`` is False (plain TCP), True (TLS checked against the system's CAs and the server's name) or
    an :class:`ssl.SSLContext` of your own (a private CA, a client certificate).
    ``trace`` writes a trace record of each send (who sent which message when, how long it took,
    where it was stored) to ``trace_topic`` (default RMQ_SYS_TRACE_TOPIC), as the Java client's
    enableMsgTrace and customizedTraceTopic do (docs/client.md#message-trace).
    ``inner_batches`` gives each batch its own UNIQ_KEY, so that a BatchCQ topic stores it as one
    record; set it False against Apache RocketMQ brokers, which stamp the batch's key on each of its
    messages.
    """

    kind = "producer"

    def __init__(
        self,
        group: str,
        namesrv: str,
        *,
        instance_name: str | None = None,
        send_timeout: float = 3.0,
        retry_times: int = 2,
        compress_over: int = 4096,
        max_message_size: int = 4 * 1024 * 1024,
        fault_avoidance: bool = True,
        queue_selector: QueueSelector | None = None,
        busy_poll_us: int = CLIENT_LIMIT_US,
        busy_poll_adaptive: bool = True,
        poll_name_server_interval: float = POLL_NAMESRV_INTERVAL_S,
        credentials: Credentials | None = None,
        tls: bool | ssl.SSLContext = False,
        trace: bool = False,
        trace_topic: str | None = None,
        inner_batches: bool = True,
    ) -> None:
        check_group("producer", group)
        check_credentials(credentials)
        ssl_context = tls_context(tls)
        check_positive("send_timeout", send_timeout)
        check_range("retry_times", retry_times, 0)
        check_range("compress_over", compress_over, 0)
        check_range("max_message_size", max_message_size, 1)
        check_range("busy_poll_us", busy_poll_us, 0, MAX_LIMIT_US)
        check_range("poll_name_server_interval", poll_name_server_interval, *POLL_NAMESRV_INTERVAL_RANGE_S)
        super().__init__()
        self.group = group
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.compress_over = compress_over
        self.max_message_size = max_message_size
        self.inner_batches = inner_batches
        self.queue_selector: QueueSelector = queue_selector or select_by_hash
        self._instance = ClientInstance(
            namesrv,
            instance_name=instance_name,
            request_timeout=send_timeout,
            route_refresh_interval=poll_name_server_interval,
            busy_poll_us=busy_poll_us,
            busy_poll_adaptive=busy_poll_adaptive,
            credentials=credentials,
            ssl_context=ssl_context,
        )
        self._faults = FaultStrategy(enabled=fault_avoidance)
        self._ids = UniqueIdGenerator(self._instance.client_ip)
        self._publish: dict[str, PublishInfo] = {}
        self._valid_topics: set[str] = set()
        self._callback_tasks: set[asyncio.Task[None]] = set()
        # The blocking facade's sockets (no socket until its first send).
        self._lane = DirectLane(
            busy_poll_us=busy_poll_us,
            credentials=credentials,
            ssl_context=ssl_context,
            busy_poll_adaptive=busy_poll_adaptive,
        )
        self._template_refresh: asyncio.Task[None] | None = None
        self._trace = None
        if trace:
            self._trace = trace_dispatcher(group, "PRODUCE", namesrv, credentials, ssl_context, trace_topic)

    @property
    def client_id(self) -> str:
        """``ip@instance``: how brokers know this client."""
        return self._instance.client_id

    # life cycle --------------------------------------------------------------------------------

    async def _start(self) -> None:
        """Register the group and start the route refresh and heartbeat loops."""
        self._instance.register_producer(self.group)
        self._instance.add_route_listener(self._on_route_changed)
        self._instance.start()
        self._template_refresh = asyncio.create_task(self._refresh_template_topics())
        if self._trace is not None:
            await self._trace.start()

    async def _close(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for the sends started by :meth:`send_with_callback` (the callbacks
        of those still going then get a :class:`ClientStateError`), unregister from the brokers and
        close every connection."""
        deadline = time.monotonic() + timeout
        if self._callback_tasks:
            _, unfinished = await asyncio.wait(self._callback_tasks, timeout=timeout)
            for task in unfinished:
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
        if self._template_refresh is not None:
            self._template_refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._template_refresh
        if self._trace is not None:  # after the callback sends: their records go out too
            await self._trace.close(deadline - time.monotonic())
        self._lane.close()
        await self._instance.close()

    # routes ------------------------------------------------------------------------------------

    def _on_route_changed(self, topic: str, route: TopicRouteData | None) -> None:
        # Recomputed from the instance's cached route on the next send (TBW102's, if it is gone).
        self._publish.pop(topic, None)

    async def _publish_info(self, topic: str) -> PublishInfo:
        info = self._publish.get(topic)
        if info is not None:
            return info
        queues, from_template = await self._instance.publish_queues(topic)
        if not queues and self._instance.has_route(topic) and await self._instance.refresh_route_soon(topic):
            # Every group of the topic lost its master: one may be registered since.
            queues, from_template = await self._instance.publish_queues(topic)
        if not queues:
            raise NoRouteError(
                f"no route for topic {topic!r}: no broker has it, and no broker offers {DEFAULT_TOPIC} "
                "to create it (autoCreateTopicEnable is off); create the topic first"
            )
        info = PublishInfo(topic, queues, from_template=from_template)
        self._publish[topic] = info
        return info

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a send to ``topic`` may go to, in route order (by broker name, then queue id):
        what ``queue_selector`` picks from (RocketMQ's fetchPublishMessageQueues). Raises
        :class:`NoRouteError` when no broker has the topic or can create it."""
        return list((await self._publish_info(topic)).queues)

    async def _refresh_template_topics(self) -> None:
        """Topics first sent to through TBW102 are not in the instance's route table (the name server
        had no route for them); look them up as often as routes are refreshed, as RocketMQ does."""
        while True:
            await asyncio.sleep(self._instance.route_refresh_interval)
            for topic, info in list(self._publish.items()):
                if not info.from_template:
                    continue
                try:
                    await self._instance.fetch_route(topic)  # a new route reaches _on_route_changed
                except CometMQError as exc:
                    log.info("cannot refresh the route of %s: %s", topic, exc)

    # validation and encoding -------------------------------------------------------------------

    def _check_topic(self, topic: str) -> None:
        problem = topic_name_error(topic)
        if problem is not None:
            raise InvalidMessageError(f"topic {topic!r}: {problem}")
        if topic in SEND_FORBIDDEN_TOPICS:
            raise InvalidMessageError(f"topic {topic!r} is a system topic clients may not send to")
        self._valid_topics.add(topic)

    def _properties_text(self, msg: Message, new_id: str | None = None) -> tuple[str, str]:
        """The encoded properties of ``msg`` and its UNIQ_KEY: the message's own if it has one, else
        ``new_id``, else a new one.

        Built as one string rather than through a dict: this runs once per message of a batch.
        """
        props = msg.properties
        uniq = None
        pairs = 1
        text = ""
        if props:
            if not RESERVED_PROPERTIES.isdisjoint(props):
                names = sorted(RESERVED_PROPERTIES.intersection(props))
                raise InvalidMessageError(
                    f"property names {names} are reserved by RocketMQ: set tags, keys, delay_level "
                    "deliver_at_ms and delay_ms through the Message fields"
                )
            for name, value in props.items():
                if not name.strip() or not isinstance(value, str):
                    raise InvalidMessageError(
                        f"property {name!r}: names must not be blank, values must be str"
                    )
            uniq = props.get("UNIQ_KEY")
            text = "\x02".join([f"{name}\x01{value}" for name, value in props.items()])
            pairs = len(props) + (uniq is None)
        if uniq is None:
            uniq = new_id or self._ids.next_id()
            text = _UNIQ_PREFIX + uniq + "\x02" + text if text else _UNIQ_PREFIX + uniq
        tags = msg.tags
        if tags:
            text += "\x02TAGS\x01" + tags
            pairs += 1
        keys = msg.keys
        if keys:
            text += "\x02KEYS\x01" + (keys if isinstance(keys, str) else " ".join(keys))
            pairs += 1
        delay = msg.delay_level
        if delay:
            # No upper bound here: a broker may be configured with more than the default 18 levels,
            # and it caps a higher level at its highest, as RocketMQ's does.
            if delay < 0:
                raise InvalidMessageError(f"delay level {delay} is negative: 0 is no delay, 1 the shortest")
            text += "\x02DELAY\x01" + str(delay)
            pairs += 1
        deliver_at = msg.deliver_at_ms
        delay_ms = msg.delay_ms
        if deliver_at is not None or delay_ms is not None:
            if (deliver_at is not None) + (delay_ms is not None) + bool(delay) > 1:
                raise InvalidMessageError("a message has one of delay_level, deliver_at_ms and delay_ms")
            if deliver_at is not None:
                if isinstance(deliver_at, bool) or not isinstance(deliver_at, int) or deliver_at < 0:
                    raise InvalidMessageError(f"deliver_at_ms {deliver_at!r} is not a time in epoch ms")
                text += "\x02TIMER_DELIVER_MS\x01" + str(deliver_at)
            else:
                if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
                    raise InvalidMessageError(f"delay_ms {delay_ms!r} is not a number of ms")
                text += "\x02TIMER_DELAY_MS\x01" + str(delay_ms)
            pairs += 1
        # One separator check for the whole text: a \x01 or \x02 inside tags, keys or a property
        # would shift every property after it for every client that reads the message.
        if text.count("\x01") != pairs or text.count("\x02") != pairs - 1:
            raise InvalidMessageError("tags, keys and properties must not contain \\x01 or \\x02")
        return text, uniq

    def _prepare(self, msg: Message) -> tuple[bytes, int, str, str]:
        """Validate ``msg``; its body as sent, sysFlag, encoded properties and UNIQ_KEY."""
        topic = msg.topic
        if topic not in self._valid_topics:
            self._check_topic(topic)
        body = msg.body
        size = len(body)
        if not size:
            raise InvalidMessageError(f"message to {topic!r}: the body is empty")
        if size > self.max_message_size:
            raise MessageTooLargeError(
                f"message to {topic!r}: the body is {size} bytes, over max_message_size "
                f"{self.max_message_size} bytes"
            )
        text, uniq = self._properties_text(msg)
        if len(text) > MAX_PROPERTIES_SIZE // 3 and len(text.encode()) > MAX_PROPERTIES_SIZE:
            raise InvalidMessageError(_properties_too_long(topic, len(text.encode())))
        if size >= self.compress_over:
            return zlib.compress(body, ZLIB_LEVEL), SYSFLAG_COMPRESSED, text, uniq
        return body, 0, text, uniq

    def _encode_batch(self, msgs: Sequence[Message]) -> tuple[str, list[bytes], int, list[str]]:
        """Validate a batch: its topic, body (docs/protocol.md#batch-body) as parts to write one after the
        other, body size, and the UNIQ_KEY of each message."""
        if not msgs:
            raise InvalidMessageError("a batch needs at least one message")
        topic = msgs[0].topic
        if topic not in self._valid_topics:
            self._check_topic(topic)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise InvalidMessageError(f"batch to {topic!r}: retry topics cannot take batches")
        head = ENTRY_HEAD.pack  # entry size, magic 0, body CRC 0, flag, body length
        props_len = PROPERTIES_LENGTH.pack
        parts: list[bytes] = []
        append = parts.append
        ids = self._ids.next_ids(len(msgs))
        size = 0
        # Hot path (batched produce, `cometmq bench produce`): ids made for the whole
        # batch at once, the usual message (tags at most) takes a fast path for its properties, two
        # struct packs per entry, and bodies are never copied here: the parts go to the socket as they
        # are. The general path (keys, properties) costs about twice as much per message.
        for index, msg in enumerate(msgs):
            body = msg.body
            if msg.topic != topic:
                raise InvalidMessageError(f"a batch goes to one topic: {topic!r} and {msg.topic!r} are mixed")
            if msg.delay_level or msg.deliver_at_ms is not None or msg.delay_ms is not None:
                raise InvalidMessageError("messages of a batch cannot be delayed (RocketMQ refuses them)")
            if not body:
                raise InvalidMessageError(f"message {index} of the batch to {topic!r} has an empty body")
            tags = msg.tags
            if msg.properties or msg.keys:
                text, ids[index] = self._properties_text(msg, ids[index])
            elif tags:
                if "\x01" in tags or "\x02" in tags:
                    raise InvalidMessageError("tags must not contain \\x01 or \\x02")
                text = _UNIQ_PREFIX + ids[index] + "\x02TAGS\x01" + tags
            else:
                text = _UNIQ_PREFIX + ids[index]
            props = text.encode()
            if len(props) > MAX_PROPERTIES_SIZE:
                raise InvalidMessageError(_properties_too_long(topic, len(props)))
            entry = _BATCH_FIXED + len(body) + len(props)
            append(head(entry, 0, 0, msg.flag, len(body)))
            append(body)
            append(props_len(len(props)) + props)
            size += entry
        if size > self.max_message_size:
            raise MessageTooLargeError(
                f"batch to {topic!r}: {size} bytes, over max_message_size {self.max_message_size} bytes; "
                "split it into smaller batches"
            )
        return topic, parts, size, ids

    # sending -----------------------------------------------------------------------------------

    async def send(
        self, msg: Message, *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> SendResult:
        """Send one message and wait until the broker has stored it.

        ``sharding_key`` sends every message with the same key to the same queue (the one the
        producer's ``queue_selector`` picks), so they are stored and consumed in send order;
        ``queue`` sends to exactly that queue. Neither retries on another broker, which would break
        the order. Raises :class:`InvalidMessageError` before any I/O for a message that cannot be
        sent, :class:`BrokerError` when the broker refuses it (after the retries RocketMQ makes),
        and :class:`RemotingTimeoutError` / :class:`ConnectionClosedError` when no broker answered.
        """
        if self._trace is None:
            return await self._deliver(self._single_request(msg), queue, sharding_key)
        started = now_ms()
        result = await self._deliver(self._single_request(msg), queue, sharding_key)
        self._traced((msg,), result, started)
        return result

    async def send_batch(
        self, msgs: Sequence[Message], *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> SendResult:
        """Send messages of one topic in one request; the broker stores them consecutively in one
        queue. Batches are never compressed and cannot be delayed. The result's ``msg_id`` and
        ``offset_msg_id`` are the ids joined by ``,``; ``queue_offset`` is the first message's. To a
        topic whose ``queue.type`` is ``BatchCQ`` the batch is stored as one record (an inner batch,
        consumers split it) and ``offset_msg_id`` is that record's one id.
        ``queue`` and ``sharding_key`` work as in :meth:`send`."""
        if self._trace is None:
            return await self._deliver(self._batch_request(msgs), queue, sharding_key)
        started = now_ms()
        result = await self._deliver(self._batch_request(msgs), queue, sharding_key)
        self._traced(msgs, result, started)
        return result

    def _traced(
        self,
        msgs: Sequence[Message],
        result: SendResult,
        started_ms: int,
        msg_type: MessageType = MessageType.Normal_Msg,
    ) -> None:
        """Queue the Pub records of a send that *result* answers."""
        assert self._trace is not None
        store_host = self._instance.broker_addr(result.queue.broker_name) or ""
        self._trace.sent(self.group, msgs, result, started_ms, store_host, msg_type)

    def _single_request(self, msg: Message) -> _Request:
        if self._state is not RUNNING:
            self._check_running()
        body, sys_flag, text, uniq = self._prepare(msg)
        header = send_header(self.group, msg.topic, text, sys_flag, msg.flag)
        return _Request(RequestCode.SEND_MESSAGE_V2, msg.topic, header, body, uniq)

    def _batch_request(self, msgs: Sequence[Message]) -> _Request:
        if self._state is not RUNNING:
            self._check_running()
        topic, parts, _, ids = self._encode_batch(msgs)
        # The batch's own UNIQ_KEY, as RocketMQ 5's producer sets it on every batch: a broker stores a
        # batch to a BatchCQ topic as one inner-batch record when it carries one (docs/client.md).
        # Apache RocketMQ brokers append a batch's properties to each of its messages, so there every
        # message would get the batch's key: ``inner_batches=False`` leaves it out.
        properties = _UNIQ_PREFIX + self._ids.next_id() + "\x02" if self.inner_batches else ""
        header = send_header(self.group, topic, properties, batch=True)
        return _Request(RequestCode.SEND_BATCH_MESSAGE, topic, header, parts, ",".join(ids))

    async def _deliver(
        self,
        request: _Request,
        queue: MessageQueue | None,
        sharding_key: str | None,
        written: _Written | None = None,
    ) -> SendResult:
        """A send with retries on other brokers, or to the one queue *queue* or *sharding_key*
        names, without; *written*: its first attempt, if that is made already."""
        if queue is None and sharding_key is None:
            return await self._send_retrying(request, written)
        if written is not None:
            return await self._settle(*written, request.uniq)
        target = await self._fixed_queue(request.topic, queue, sharding_key)
        try:
            return await self._send_once(request, target, time.monotonic() + self.send_timeout)
        except CometMQError as exc:
            await self._refresh_after_failure(target, exc)
            raise

    def send_with_callback(
        self,
        msg: Message,
        callback: SendCallback,
        *,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
    ) -> None:
        """Start sending ``msg`` and return at once; ``callback`` is called on the event loop with the
        :class:`SendResult` or the exception the send ended with (retries, ``queue`` and
        ``sharding_key`` as in :meth:`send`). An invalid message raises here, before anything is sent.
        :meth:`close` waits for these sends (up to its timeout)."""
        request = self._single_request(msg)
        if self._trace is not None:
            callback = self._traced_callback(msg, callback)
        # The first attempt is written now when the route and the connection are at hand: a task's
        # first step waits for the next loop step, a visible share of the end-to-end latency
        # (`cometmq bench latency`).
        written = self._write_first_attempt(request, queue, sharding_key)
        sending = self._deliver(request, queue, sharding_key, written)
        task = asyncio.get_running_loop().create_task(_call_back(sending, callback))
        self._callback_tasks.add(task)
        task.add_done_callback(self._callback_tasks.discard)

    def _traced_callback(self, msg: Message, callback: SendCallback) -> SendCallback:
        started = now_ms()

        def traced(outcome: SendResult | BaseException) -> object:
            if isinstance(outcome, SendResult):
                self._traced((msg,), outcome, started)
            return callback(outcome)

        return traced

    def _write_first_attempt(
        self, request: _Request, queue: MessageQueue | None, sharding_key: str | None
    ) -> _Written | None:
        known = self._known_target(request.topic, queue, sharding_key)
        if known is None:
            return None
        target, addr = known
        conn = self._instance.remoting.open_connection(addr)
        if conn is None:
            return None
        return target, time.monotonic(), conn.start_invoke(_send_request(request, target), self.send_timeout)

    async def send_oneway(
        self, msg: Message, *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> None:
        """Send ``msg`` without waiting for the broker's answer: fastest, but a lost message is not
        noticed. Returns once the request is written to the connection; no retry. ``queue`` and
        ``sharding_key`` work as in :meth:`send`."""
        request = self._single_request(msg)
        if queue is None and sharding_key is None:
            target = self._faults.select(await self._publish_info(request.topic))
        else:
            target = await self._fixed_queue(request.topic, queue, sharding_key)
        await self._instance.remoting.invoke_oneway(
            broker_addr_of(self._instance, target), _send_request(request, target)
        )

    # the blocking facade's sends ------------------------------------------------------------------

    def _send_direct(
        self, msg: Message, queue: MessageQueue | None, sharding_key: str | None
    ) -> SendResult | Coroutine[Any, Any, SendResult]:
        """:meth:`send` for the blocking facade, on the caller's thread (not the loop's): the result
        when the first attempt is made and answered here, through :attr:`_lane`; else what is left of
        the send (retries, a route to look up, a busy lane), as a coroutine to run on the loop."""
        if self._trace is not None:  # the trace queue belongs to the loop
            return self.send(msg, queue=queue, sharding_key=sharding_key)
        return self._attempt_direct(self._single_request(msg), queue, sharding_key)

    def _send_batch_direct(
        self, msgs: Sequence[Message], queue: MessageQueue | None, sharding_key: str | None
    ) -> SendResult | Coroutine[Any, Any, SendResult]:
        """:meth:`send_batch` for the blocking facade, as :meth:`_send_direct`."""
        if self._trace is not None:
            return self.send_batch(msgs, queue=queue, sharding_key=sharding_key)
        return self._attempt_direct(self._batch_request(msgs), queue, sharding_key)

    def _attempt_direct(
        self, request: _Request, queue: MessageQueue | None, sharding_key: str | None
    ) -> SendResult | Coroutine[Any, Any, SendResult]:
        # Only what the loop already knows (routes, addresses) is read here; the loop owns the rest.
        known = self._known_target(request.topic, queue, sharding_key)
        if known is None:
            return self._deliver(request, queue, sharding_key)
        target, addr = known
        started = time.monotonic()
        outcome: RemotingCommand | CometMQError | None
        try:
            outcome = self._lane.invoke(addr, _send_request(request, target), self.send_timeout)
        except (ConnectionClosedError, RemotingTimeoutError) as exc:
            outcome = exc
        if outcome is None:  # another thread is using the lane's connection: the loop's pipelines
            return self._deliver(request, queue, sharding_key)
        if isinstance(outcome, RemotingCommand) and outcome.code in _SEND_STATUS:
            return self._settled(target, started, outcome, request.uniq)
        # A failure or a refusal: the loop settles it as it settles its own attempts, and retries.
        return self._deliver(request, queue, sharding_key, (target, started, _replay(outcome)))

    def _known_target(
        self, topic: str, queue: MessageQueue | None, sharding_key: str | None
    ) -> tuple[MessageQueue, str] | None:
        """The queue a send goes to and its broker's address, chosen without I/O: *queue*, the queue
        of *sharding_key*, or the fault strategy's pick; None while the topic's route (or that
        broker's address) is not looked up yet."""
        if queue is not None:
            _check_queue_topic(topic, queue)
            target = queue
        else:
            info = self._publish.get(topic)
            if info is None:
                return None
            target = self._faults.select(info) if sharding_key is None else self._by_key(info, sharding_key)
        addr = self._instance.broker_addr(target.broker_name)
        return None if addr is None else (target, addr)

    async def _fixed_queue(
        self, topic: str, queue: MessageQueue | None, sharding_key: str | None
    ) -> MessageQueue:
        if queue is not None:
            _check_queue_topic(topic, queue)
            if self._instance.broker_addr(queue.broker_name) is None:
                await self._publish_info(topic)  # learn the brokers' addresses
            return queue
        assert sharding_key is not None
        return self._by_key(await self._publish_info(topic), sharding_key)

    def _by_key(self, info: PublishInfo, sharding_key: str) -> MessageQueue:
        queue = self.queue_selector(info.queues, sharding_key)
        _check_queue_topic(info.topic, queue)
        return queue

    async def _send_retrying(self, request: _Request, written: _Written | None = None) -> SendResult:
        """DefaultMQProducerImpl.sendDefaultImpl: up to 1 + retry_times attempts within the timeout,
        each on the queue the fault strategy picks, away from the broker that just failed; but an
        attempt whose outcome is unknown (written, then a timeout or the connection lost) is made
        once more on the same queue first, so that a broker deduplicating the topic answers with the
        copy it may hold already. *written*: the first attempt, if it is already written."""
        topic = request.topic
        deadline = (time.monotonic() if written is None else written[1]) + self.send_timeout
        last_broker: str | None = None
        attempts: list[str] = []
        error: CometMQError | None = None
        # The queue of an attempt whose outcome is unknown, tried once more before any other: the
        # broker that may hold the message already is the one whose deduplication can tell.
        again_on: MessageQueue | None = None
        for attempts_left in range(self.retry_times, -1, -1):
            if written is not None:
                queue, started, reply = written
                written = None
                attempt = self._settle(queue, started, reply, request.uniq)
            else:
                # Looked up per attempt (a dict hit): a route change meanwhile drops the cached entry.
                info = self._publish.get(topic) or await self._publish_info(topic)
                queue = again_on or self._faults.select(info, last_broker)
                # An attempt with another after it waits at most half the time left, so that one whose
                # answer is lost leaves time to ask the same broker again.
                now = time.monotonic()
                attempt = self._send_once(
                    request, queue, now + (deadline - now) / 2 if attempts_left else deadline
                )
            try:
                return await attempt
            except BrokerError as exc:
                if exc.code not in RETRY_RESPONSE_CODES:
                    raise
                error = exc
            except (ConnectionClosedError, RemotingTimeoutError, QueueNotRoutedError) as exc:
                error = exc
            attempts.append(f"{queue}: {error}")
            last_broker = queue.broker_name
            again_on = queue if again_on is None and isinstance(error, _OUTCOME_UNKNOWN) else None
            if again_on is not None:
                log.debug("no answer from %s (%s): sending to the same queue again", queue, error)
            await self._refresh_after_failure(queue, error)
            if time.monotonic() >= deadline:
                break
        assert error is not None
        error.add_note(
            f"sending to {topic!r} failed {len(attempts)} time(s) within {self.send_timeout:g} s: "
            + "; ".join(attempts)
        )
        raise error

    async def _refresh_after_failure(self, queue: MessageQueue, error: CometMQError) -> None:
        """After an attempt on *queue* failed with *error*: a broker that cannot be reached or does
        not serve may have lost its mastership (died, paused, deposed by a failover), so the route is
        looked up at once (at most once a second per topic) rather than at the next periodic
        refresh; the next attempt, and the next send, go to the master the name server names now.
        A broker group whose master changed starts afresh in the fault strategy: the failures were
        the old master's."""
        broker = queue.broker_name
        master = self._instance.broker_addr(broker)
        await self._instance.refresh_route_if_unreachable(queue.topic, error)
        if self._instance.broker_addr(broker) != master:
            self._faults.forget(broker)

    async def _send_once(self, request: _Request, queue: MessageQueue, deadline: float) -> SendResult:
        """One attempt of *request* on *queue*."""
        started = time.monotonic()
        timeout = deadline - started
        if timeout <= 0:
            raise RemotingTimeoutError(f"no time left to send to {queue} within {self.send_timeout:g} s")
        try:
            addr = broker_addr_of(self._instance, queue)
        except QueueNotRoutedError:
            self._faults.update(queue.broker_name, 0.0, True)
            raise
        reply = self._instance.remoting.invoke(addr, _send_request(request, queue), timeout)
        return await self._settle(queue, started, reply, request.uniq)

    async def _settle(
        self, queue: MessageQueue, started: float, reply: Awaitable[RemotingCommand], uniq: str
    ) -> SendResult:
        """The result of the attempt written at *started* (monotonic) whose response *reply* brings."""
        try:
            response = await reply
        except (ConnectionClosedError, RemotingTimeoutError):
            self._faults.update(queue.broker_name, (time.monotonic() - started) * 1000.0, True)
            raise
        return self._settled(queue, started, response, uniq)

    def _settled(
        self, queue: MessageQueue, started: float, response: RemotingCommand, uniq: str
    ) -> SendResult:
        """The result of the attempt written at *started* that *response* answers (or BrokerError)."""
        broker = queue.broker_name
        faults = self._faults
        status = _SEND_STATUS.get(response.code)
        if faults.enabled:
            faults.update(broker, (time.monotonic() - started) * 1000.0, status is None)
        if status is None:
            raise BrokerError(response.code, response.remark)
        answer = decode_answer(SendMessageResponseHeader, response)
        queue_id = answer.queue_id
        return SendResult(
            status,
            uniq,
            answer.msg_id,
            queue if queue_id == queue.queue_id else MessageQueue(queue.topic, broker, queue_id),
            answer.queue_offset,
            answer.msg_region or DEFAULT_REGION,
            answer.trace_on is not False,
        )


async def _call_back(sending: Awaitable[SendResult], callback: SendCallback) -> None:
    outcome: SendResult | BaseException
    try:
        outcome = await sending
    except Exception as exc:
        outcome = exc
    except asyncio.CancelledError:  # by close(), whose timeout ran out first
        outcome = ClientStateError("the producer was closed before this send had its answer")
    try:
        callback(outcome)
    except Exception:
        log.exception("send callback %r failed", callback)


async def _replay(outcome: RemotingCommand | CometMQError) -> RemotingCommand:
    """An attempt made already, as the awaitable reply :meth:`Producer._settle` takes."""
    if isinstance(outcome, CometMQError):
        raise outcome
    return outcome


def _check_queue_topic(topic: str, queue: MessageQueue) -> None:
    if queue.topic != topic:
        raise InvalidMessageError(f"the message goes to topic {topic!r} but the queue is of {queue.topic!r}")


def trace_dispatcher(
    group: str,
    kind: str,
    namesrv: str,
    credentials: Credentials | None,
    ssl_context: ssl.SSLContext | None,
    topic: str | None,
) -> TraceDispatcher:
    """The trace dispatcher of a client of ``group`` (``kind``: PRODUCE or CONSUME): its records go
    out through a producer of their own, which traces nothing (AsyncTraceDispatcher's traceProducer).
    Raises :class:`OptionError` for an illegal ``topic``, or a ``group`` too long to name that
    producer's group."""
    if topic is not None and (problem := topic_name_error(topic)) is not None:
        raise OptionError(f"trace_topic {topic!r}: {problem}")
    inner_group = trace_group(group, kind)
    if len(inner_group) > GROUP_MAX_LENGTH:
        longest = GROUP_MAX_LENGTH - (len(inner_group) - len(group))
        raise OptionError(
            f"group {group!r} is too long for message trace: with trace=True a group may have at most "
            f"{longest} characters (its trace producer's group adds a prefix and a suffix to it)"
        )
    producer = Producer(
        inner_group,
        namesrv,
        credentials=credentials,
        tls=ssl_context or False,
        send_timeout=5.0,  # AsyncTraceDispatcher's
    )
    return TraceDispatcher(producer, topic)


def select_by_hash(queues: Sequence[MessageQueue], sharding_key: str) -> MessageQueue:
    """RocketMQ's SelectMessageQueueByHash: the queue at ``abs(key.hashCode() % len(queues))``, with
    Java's String.hashCode. Not Python's ``hash()``, which differs from run to run."""
    return queues[abs(java_string_hash(sharding_key)) % len(queues)]


def _properties_too_long(topic: str, length: int) -> str:
    return (
        f"message to {topic!r}: its properties (tags, keys and the rest) take {length} bytes, "
        f"over the {MAX_PROPERTIES_SIZE} a record can hold"
    )


def _send_request(request: _Request, queue: MessageQueue) -> RemotingCommand:
    """The command of one attempt of *request* on *queue*: the header, shared by the attempts, names
    its queue id."""
    header = request.header
    header.queue_id = queue.queue_id
    fields = header.encode(compact=True)
    body = request.body
    if isinstance(body, bytes):
        return RemotingCommand(code=request.code, ext_fields=fields, body=body)
    return RemotingCommand(code=request.code, ext_fields=fields, body_parts=body)
