"""PushConsumer against a real `cometmq standalone`: clustering, rebalance, broadcasting, orderly,
retries and dead letters, tag filters, the ``async for`` form.

Messages are sent with raw SEND_MESSAGE requests (not the native Producer) so that these tests
depend on the consumer alone.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from client_support import run, send_request

from cometmq.client import AdminClient, ConsumeResult, LitePullConsumer, PushConsumer
from cometmq.client import consumer as consumer_module
from cometmq.client.consumer import Listener
from cometmq.client.message import MessageQueue, ReceivedMessage
from cometmq.errors import BrokerError, CometMQError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.remoting import RemotingClient
from processes import StandaloneServer, broker_address
from waiting import wait_until


class Broker:
    """Raw requests to the standalone server's broker: sends and committed offsets."""

    def __init__(self, server: StandaloneServer) -> None:
        assert server.process is not None
        self.namesrv = server.namesrv
        self.addr = broker_address(server.process)
        self.client = RemotingClient()

    async def close(self) -> None:
        await self.client.close()

    async def create_topic(self, topic: str, queues: int) -> None:
        async with AdminClient(self.namesrv) as admin:
            await admin.create_topic(topic, queues=queues)

    async def send(
        self,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        tags: str | None = None,
        properties: dict[str, str] | None = None,
    ) -> int:
        props = dict(properties or {})
        if tags:
            props["TAGS"] = tags
        request = send_request(topic, body, queue_id, properties=props, v2=False)
        response = await self.client.invoke(self.addr, request, timeout=10)
        assert response.code == 0, response.remark
        return int(response.ext_fields["queueOffset"])

    async def committed(self, group: str, topic: str, queue_id: int) -> int | None:
        fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
        request = RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext_fields=fields)
        response = await self.client.invoke(self.addr, request, timeout=10)
        return int(response.ext_fields["offset"]) if response.code == 0 else None

    async def all_committed(self, group: str, topic: str, ends: dict[int, int]) -> bool:
        """Whether the group's committed offsets of ``topic`` reached ``ends`` (queue id → end)."""
        for queue_id, end in ends.items():
            if await self.committed(group, topic, queue_id) != end:
                return False
        return True


@pytest.fixture
def broker(server: StandaloneServer) -> Iterator[Broker]:
    """The module's one standalone server (conftest's ``server``): each test has topics and groups of
    its own."""
    yield Broker(server)


# RocketMQ's persistConsumerOffsetInterval (5 s) shortened, for tests that wait for a running consumer's
# offsets to reach the broker: the wait ends as soon as they are there, so only its length changes.
FAST_PERSIST_INTERVAL_S = 0.2


@pytest.fixture
def fast_offset_persistence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumer_module, "PERSIST_INTERVAL_S", FAST_PERSIST_INTERVAL_S)


class Recorder:
    """An async listener that records what it got (and by whom), in global arrival order."""

    def __init__(self, log: list[tuple[str, ReceivedMessage]] | None = None, name: str = "") -> None:
        self.log = log if log is not None else []
        self.name = name

    async def __call__(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        self.log.extend((self.name, m) for m in messages)
        return ConsumeResult.SUCCESS

    def bodies(self) -> list[bytes]:
        return [m.body for _, m in self.log]


def consumer(namesrv: str, group: str, topic: str, expression: str = "*", **options: object) -> PushConsumer:
    c = PushConsumer(group, namesrv, consume_from="first", **options)  # type: ignore[arg-type]
    c.subscribe(topic, expression)
    return c


# clustering ------------------------------------------------------------------------------------


def test_clustering_consumes_each_message_once_and_a_restarted_member_resumes_where_it_committed(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        await broker.create_topic("ClusterTopic", 4)
        first = [f"first-{i}".encode() for i in range(40)]
        for i, body in enumerate(first):
            await broker.send("ClusterTopic", body, queue_id=i % 4)
        recorder = Recorder()
        c1 = consumer(broker.namesrv, "GID_cluster", "ClusterTopic")
        c1.listen(recorder)
        await c1.start()
        await wait_until(lambda: len(recorder.log) >= 40, message="first 40 consumed")
        await c1.close()
        assert Counter(recorder.bodies()) == Counter(first)  # each exactly once
        # close() committed every queue to its end (10 messages each).
        assert await broker.all_committed("GID_cluster", "ClusterTopic", {q: 10 for q in range(4)})
        # close() did commit: the periodic persistence is shortened only for the second member, whose
        # offsets the test waits for while it runs.
        monkeypatch.setattr(consumer_module, "PERSIST_INTERVAL_S", FAST_PERSIST_INTERVAL_S)

        second = [f"second-{i}".encode() for i in range(20)]
        for i, body in enumerate(second):
            await broker.send("ClusterTopic", body, queue_id=i % 4)
        got: list[bytes] = []
        threads: set[str] = set()

        def blocking_listener(messages: list[ReceivedMessage]) -> None:  # a plain function: thread pool
            threads.add(threading.current_thread().name)
            got.extend(m.body for m in messages)

        c2 = consumer(broker.namesrv, "GID_cluster", "ClusterTopic")
        c2.listen(blocking_listener)
        await c2.start()
        await wait_until(lambda: len(got) >= 20, message="second 20 consumed")
        await wait_until(
            lambda: broker.all_committed("GID_cluster", "ClusterTopic", {q: 15 for q in range(4)}),
            message="offsets committed",
        )
        await c2.close()
        assert Counter(got) == Counter(second)  # nothing of the first round again
        assert threading.main_thread().name not in threads
        await broker.close()

    run(scenario())


@pytest.mark.usefixtures("fast_offset_persistence")
def test_rebalance_as_members_join_and_leave(broker: Broker) -> None:
    """Queues move as a second and third member join and then leave; every message is consumed.

    Duplicates are bounded: before each membership change every earlier message is consumed and its
    offset committed, and one batch is sent *during* the change. A message can only be consumed twice
    when the member that lost its queue consumed it after the new owner had read the queue's
    committed offset, so duplicates may only come from the batches sent during changes, never from
    a batch committed before one.
    """
    topic, group = "RebalanceTopic", "GID_rebalance"
    queues = {MessageQueue(topic, "", q) for q in range(8)}

    async def scenario() -> None:
        await broker.create_topic(topic, 8)
        log: list[tuple[str, ReceivedMessage]] = []
        members: dict[str, PushConsumer] = {}
        sent: list[bytes] = []
        settled_batches: list[set[bytes]] = []
        changing_batches: list[set[bytes]] = []

        async def send_batch(name: str) -> set[bytes]:
            batch = [f"{name}-{i}".encode() for i in range(24)]
            for i, body in enumerate(batch):
                await broker.send(topic, body, queue_id=i % 8)
            sent.extend(batch)
            return set(batch)

        async def add_member(name: str) -> None:
            c = consumer(broker.namesrv, group, topic, allocate="averagely")
            c.listen(Recorder(log, name))
            await c.start()
            members[name] = c

        def owners_partition_the_topic() -> bool:
            shares = [{q.queue_id for q in c.assigned_queues if q.topic == topic} for c in members.values()]
            return sum(len(s) for s in shares) == 8 and set().union(*shares) == {q.queue_id for q in queues}

        async def settle() -> None:
            await wait_until(owners_partition_the_topic, message="each queue owned by one member")
            await wait_until(lambda: set(sent) <= {m.body for _, m in log}, message="all consumed")
            ends = {q: len(sent) // 8 for q in range(8)}
            await wait_until(lambda: broker.all_committed(group, topic, ends), message="offsets committed")

        await add_member("c1")
        settled_batches.append(await send_batch("b0"))
        await settle()
        for change in ("+c2", "+c3", "-c3", "-c2"):
            name = change[1:]
            if change[0] == "+":
                await add_member(name)
                changing_batches.append(await send_batch(f"during{change}"))
            else:
                changing_batches.append(await send_batch(f"during{change}"))
                await members.pop(name).close()
            await settle()
            settled_batches.append(await send_batch(f"after{change}"))
            await settle()
            shares = [c.assigned_queues for c in members.values()]
            assert all(shares), f"a member got no queue after {change}: {shares}"
        for c in members.values():
            await c.close()
        await broker.close()

        counts = Counter(m.body for _, m in log)
        assert set(counts) == set(sent)
        duplicated = {body for body, n in counts.items() if n > 1}
        assert not duplicated & set().union(*settled_batches)
        assert len(duplicated) <= sum(len(b) for b in changing_batches)
        # Every member that was ever there consumed something.
        assert {name for name, _ in log} == {"c1", "c2", "c3"}

    run(scenario(), timeout=280)


# broadcasting ----------------------------------------------------------------------------------


def test_broadcasting_members_each_get_every_message_and_keep_offsets_in_a_file(
    broker: Broker, tmp_path: Path
) -> None:
    async def scenario() -> None:
        await broker.create_topic("BroadcastTopic", 4)
        bodies = [f"b-{i}".encode() for i in range(20)]
        for i, body in enumerate(bodies):
            await broker.send("BroadcastTopic", body, queue_id=i % 4)
        recorders = [Recorder(), Recorder()]
        members = []
        for n, recorder in enumerate(recorders):
            c = consumer(
                broker.namesrv,
                "GID_broadcast",
                "BroadcastTopic",
                message_model="broadcasting",
                instance_name=f"bcast-{n}",
                offsets_dir=tmp_path / "offsets",
            )
            c.listen(recorder)
            await c.start()
            members.append(c)
        for recorder in recorders:
            await wait_until(lambda r=recorder: len(r.log) >= 20, message="every message to each member")
        for c in members:
            await c.close()
        for recorder in recorders:
            assert Counter(recorder.bodies()) == Counter(bodies)
        for c in members:
            assert c.offsets_path is not None and c.offsets_path.is_relative_to(tmp_path / "offsets")
            table = json.loads(c.offsets_path.read_text())["offsetTable"]
            assert {(e["topic"], e["queueId"]): e["offset"] for e in table} == {
                ("BroadcastTopic", q): 5 for q in range(4)
            }
        # Nothing was committed to the broker for a broadcasting group.
        assert await broker.committed("GID_broadcast", "BroadcastTopic", 0) in (None, 0)
        await broker.close()

    run(scenario())


# orderly ---------------------------------------------------------------------------------------


def test_orderly_keeps_each_queues_order_while_a_second_member_joins(broker: Broker) -> None:
    topic, group = "OrderlyTopic", "GID_orderly"

    async def scenario() -> None:
        await broker.create_topic(topic, 4)
        log: list[tuple[str, ReceivedMessage]] = []

        class SlowRecorder(Recorder):
            async def __call__(self, messages: list[ReceivedMessage]) -> ConsumeResult:
                await asyncio.sleep(0.01)  # slow enough that the second member joins mid-stream
                return await super().__call__(messages)

        per_queue = 40
        for seq in range(per_queue):
            for q in range(4):
                await broker.send(topic, f"{q}:{seq}".encode(), queue_id=q)
        c1 = consumer(broker.namesrv, group, topic, orderly=True)
        c1.listen(SlowRecorder(log, "c1"))
        await c1.start()
        await wait_until(lambda: len(log) >= 20, message="c1 started consuming")
        c2 = consumer(broker.namesrv, group, topic, orderly=True)
        c2.listen(SlowRecorder(log, "c2"))
        await c2.start()
        for seq in range(per_queue, 2 * per_queue):
            for q in range(4):
                await broker.send(topic, f"{q}:{seq}".encode(), queue_id=q)
        await wait_until(
            lambda: {m.body for _, m in log} >= {f"{q}:{s}".encode() for q in range(4) for s in range(80)},
            timeout=90,
            message="everything consumed",
        )
        assert c1.assigned_queues and c2.assigned_queues
        await c1.close()
        await c2.close()
        await broker.close()

        by_queue: dict[int, list[int]] = defaultdict(list)
        for _, m in log:
            q, seq = m.body.decode().split(":")
            assert int(q) == m.queue_id
            by_queue[int(q)].append(int(seq))
        # In order, each once, across the hand-over of queues from c1 to c2.
        assert by_queue == {q: list(range(2 * per_queue)) for q in range(4)}
        assert "c2" in {name for name, _ in log}

    run(scenario(), timeout=200)


def test_orderly_retries_a_failed_message_locally_before_anything_behind_it(broker: Broker) -> None:
    async def scenario() -> None:
        await broker.create_topic("OrderlyRetryTopic", 1)
        for seq in range(5):
            await broker.send("OrderlyRetryTopic", f"{seq}".encode(), queue_id=0)
        seen: list[tuple[bytes, int]] = []

        async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
            [m] = messages
            seen.append((m.body, m.reconsume_times))
            return ConsumeResult.RECONSUME_LATER if m.body == b"2" and m.reconsume_times < 2 else None  # type: ignore[return-value]

        c = consumer(broker.namesrv, "GID_orderly_retry", "OrderlyRetryTopic", orderly=True)
        c.listen(listener)
        await c.start()
        await wait_until(lambda: len(seen) >= 7, message="all consumed")
        await c.close()
        await broker.close()
        assert seen == [(b"0", 0), (b"1", 0), (b"2", 0), (b"2", 1), (b"2", 2), (b"3", 0), (b"4", 0)]

    run(scenario())


def test_an_orderly_consumer_never_dead_letters_by_default_and_does_past_a_limit_it_is_given(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RocketMQ's orderly maxReconsumeTimes -1 is Integer.MAX_VALUE: the queue waits for the message.
    (The 1 s pause between local retries is shortened so that 20 retries take a moment.)"""
    monkeypatch.setattr(consumer_module, "ORDERLY_SUSPEND_S", 0.01)

    async def scenario() -> None:
        for topic in ("OrderlyForever", "OrderlyLimited"):
            await broker.create_topic(topic, 1)
            for seq in range(3):
                await broker.send(topic, f"{seq}".encode(), queue_id=0)

        def failing_until(retries: int, seen: list[tuple[bytes, int]]) -> Callable[..., Any]:
            async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
                [m] = messages
                seen.append((m.body, m.reconsume_times))
                if m.body == b"1" and m.reconsume_times < retries:
                    return ConsumeResult.RECONSUME_LATER
                return ConsumeResult.SUCCESS

            return listener

        forever: list[tuple[bytes, int]] = []
        c = consumer(broker.namesrv, "GID_orderly_forever", "OrderlyForever", orderly=True)
        c.listen(failing_until(20, forever))  # past the 16 a concurrent consumer would allow
        await c.start()
        await wait_until(lambda: len(forever) >= 23, message="every delivery")
        await c.close()
        assert forever == [(b"0", 0)] + [(b"1", n) for n in range(21)] + [(b"2", 0)]

        limited: list[tuple[bytes, int]] = []
        c = consumer(
            broker.namesrv, "GID_orderly_limited", "OrderlyLimited", orderly=True, max_reconsume_times=2
        )
        c.listen(failing_until(1000, limited))
        await c.start()
        await wait_until(lambda: len(limited) >= 5, message="every delivery")
        async with AdminClient(broker.namesrv) as admin:
            dead = await wait_until(
                lambda: admin.dead_letters("GID_orderly_limited"), message="the dead letter"
            )
        await c.close()
        await broker.close()
        assert limited == [(b"0", 0), (b"1", 0), (b"1", 1), (b"1", 2), (b"2", 0)]
        assert [r.body for r in dead] == [b"1"]
        async with AdminClient(broker.namesrv) as admin:
            assert await admin.dead_letters("GID_orderly_forever") == []

    run(scenario())


# retries ---------------------------------------------------------------------------------------


def test_reconsume_later_redelivers_with_growing_reconsume_times_then_dead_letters(
    quick_retries: StandaloneServer,
) -> None:
    broker = Broker(quick_retries)
    group, topic = "GID_retry", "RetryTopic"

    async def scenario() -> None:
        await broker.create_topic(topic, 2)
        await broker.send(topic, b"fails-twice", queue_id=0, tags="T", properties={"KEYS": "k1"})
        await broker.send(topic, b"always-fails", queue_id=1, tags="T", properties={"KEYS": "k2"})
        deliveries: dict[bytes, list[int]] = defaultdict(list)
        topics: set[str] = set()

        async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
            [m] = messages
            deliveries[m.body].append(m.reconsume_times)
            topics.add(m.topic)
            if m.body == b"always-fails":
                raise RuntimeError("an exception counts as RECONSUME_LATER")
            return ConsumeResult.RECONSUME_LATER if m.reconsume_times < 2 else ConsumeResult.SUCCESS

        c = consumer(quick_retries.namesrv, group, topic, max_reconsume_times=2)
        c.listen(listener)
        await c.start()

        async def dead_letters() -> list[bytes]:
            async with AdminClient(quick_retries.namesrv) as admin:
                return [r.body for r in await admin.dead_letters(group)]

        await wait_until(lambda: len(deliveries[b"fails-twice"]) >= 3, timeout=60, message="3 deliveries")
        assert await wait_until(dead_letters, timeout=60, message="a dead letter") == [b"always-fails"]
        await c.close()
        await broker.close()
        assert deliveries == {b"fails-twice": [0, 1, 2], b"always-fails": [0, 1, 2]}
        assert topics == {topic}  # retried copies show the topic they were sent to

    run(scenario())


def test_when_the_send_back_fails_the_message_is_sent_to_the_retry_topic_itself(
    quick_retries: StandaloneServer,
) -> None:
    """RocketMQ's sendMessageBackAsNormalMessage: the consumer sends a copy to %RETRY%<group> with
    the retry bookkeeping in its properties, and it comes back like a broker-made retry."""
    broker = Broker(quick_retries)
    group, topic = "GID_retry_fallback", "RetryFallback"

    async def scenario() -> None:
        await broker.create_topic(topic, 1)
        await broker.send(topic, b"fails-once", tags="T", properties={"KEYS": "k1", "UNIQ_KEY": "ID-1"})
        deliveries: list[ReceivedMessage] = []

        async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
            deliveries.extend(messages)
            return ConsumeResult.RECONSUME_LATER if len(deliveries) == 1 else ConsumeResult.SUCCESS

        c = consumer(quick_retries.namesrv, group, topic)
        c.listen(listener)
        invoke_ok = c._instance.invoke_ok
        send_backs: list[int] = []

        async def refuse_send_back(addr: str, code: int, *args: Any, **kwargs: Any) -> RemotingCommand:
            if code == RequestCode.CONSUMER_SEND_MSG_BACK:
                send_backs.append(code)
                raise BrokerError(ResponseCode.SYSTEM_ERROR, "send-back refused by the test")
            return await invoke_ok(addr, code, *args, **kwargs)

        c._instance.invoke_ok = refuse_send_back  # type: ignore[method-assign]
        await c.start()
        await wait_until(lambda: len(deliveries) >= 2, timeout=60, message="the retried copy")
        await c.close()
        await broker.close()
        first, again = deliveries[:2]
        assert send_backs  # the fallback was taken
        assert (first.reconsume_times, again.reconsume_times) == (0, 1)
        assert again.queue_offset == 0 and again.broker_name == first.broker_name
        assert (again.topic, again.body, again.tags, again.keys) == (topic, b"fails-once", "T", ["k1"])
        assert again.msg_id == first.msg_id == "ID-1"
        assert again.properties["RETRY_TOPIC"] == topic
        assert again.properties["ORIGIN_MESSAGE_ID"] == "ID-1"

    run(scenario())


def test_async_for_consumes_and_retry_later_redelivers(quick_retries: StandaloneServer) -> None:
    broker = Broker(quick_retries)
    group, topic = "GID_iter", "IterTopic"

    async def scenario() -> None:
        await broker.create_topic(topic, 2)
        for i in range(10):
            await broker.send(topic, f"it-{i}".encode(), queue_id=i % 2)
        c = consumer(quick_retries.namesrv, group, topic)
        await c.start()
        got: list[tuple[bytes, int]] = []
        async for message in c:
            got.append((message.body, message.reconsume_times))
            if message.body == b"it-3" and message.reconsume_times == 0:
                c.retry_later(message)
            if len(got) == 11:
                break
        await c.close()
        assert Counter(body for body, _ in got) == Counter(
            {f"it-{i}".encode(): 2 if i == 3 else 1 for i in range(10)}
        )
        assert (b"it-3", 1) in got
        # Offsets advanced past everything, the last message included (closing counts it).
        assert await broker.all_committed(group, topic, {0: 5, 1: 5})
        await broker.close()

    run(scenario())


# filters ---------------------------------------------------------------------------------------


@pytest.mark.usefixtures("fast_offset_persistence")
def test_tag_filter_delivers_exactly_the_matching_messages_and_moves_offsets_past_the_rest(
    broker: Broker,
) -> None:
    async def scenario() -> None:
        await broker.create_topic("TagTopic", 2)
        for i in range(30):
            await broker.send("TagTopic", f"t-{i}".encode(), queue_id=i % 2, tags="ABC"[i % 3])
        recorder = Recorder()
        c = consumer(broker.namesrv, "GID_tags", "TagTopic", "A || C")
        c.listen(recorder)
        await c.start()
        expected = {f"t-{i}".encode() for i in range(30) if i % 3 != 1}
        await wait_until(lambda: len(recorder.log) >= len(expected), message="matching messages")
        await wait_until(
            lambda: broker.all_committed("GID_tags", "TagTopic", {0: 15, 1: 15}),
            message="offsets past the filtered-out messages",
        )
        await c.close()
        await broker.close()
        assert Counter(recorder.bodies()) == Counter(expected)
        assert {m.tags for _, m in recorder.log} == {"A", "C"}

    run(scenario())


# flow control ----------------------------------------------------------------------------------


def held_listener() -> tuple[asyncio.Event, list[ReceivedMessage], Listener]:
    """A listener that records each batch, then waits until the event is set (a listener behind)."""
    release = asyncio.Event()
    got: list[ReceivedMessage] = []

    async def slow(messages: list[ReceivedMessage]) -> None:
        got.extend(messages)
        await release.wait()

    return release, got, slow


def test_a_queue_is_not_pulled_past_its_cache_limit_while_the_listener_is_behind(broker: Broker) -> None:
    async def scenario() -> None:
        await broker.create_topic("FlowTopic", 1)
        for i in range(60):
            await broker.send("FlowTopic", f"f-{i}".encode())
        release, got, slow = held_listener()
        c = consumer(
            broker.namesrv,
            "GID_flow",
            "FlowTopic",
            pull_batch_size=4,
            max_cached_messages_per_queue=8,
            concurrency=1,
        )
        c.listen(slow)
        await c.start()
        await wait_until(lambda: got, message="the first message")
        await asyncio.sleep(1.0)  # time enough for the pulls the limit must hold back

        def cached() -> int:
            table = c.running_info()["mqTable"]
            return sum(v["cachedMsgCount"] for k, v in table.items() if k.startswith("FlowTopic@"))

        # A pull is made while fewer than 8 are cached and brings at most 4.
        assert 8 <= cached() <= 8 + 4 - 1
        assert [m.body for m in got] == [b"f-0"]
        release.set()
        await wait_until(lambda: len(got) == 60, message="everything once the listener catches up")
        await c.close()
        await broker.close()
        assert [m.body for m in got] == [f"f-{i}".encode() for i in range(60)]

    run(scenario())


def test_a_queue_is_not_pulled_past_its_cached_bytes_while_the_listener_is_behind(broker: Broker) -> None:
    async def scenario() -> None:
        await broker.create_topic("FlowBytes", 1)
        body = b"b" * 32 * 1024
        for _ in range(30):
            await broker.send("FlowBytes", body)
        release, got, slow = held_listener()
        c = consumer(
            broker.namesrv,
            "GID_flow_bytes",
            "FlowBytes",
            pull_batch_size=2,
            max_cached_bytes_per_queue=100 * 1024,
            concurrency=1,
        )
        c.listen(slow)
        await c.start()
        await wait_until(lambda: got, message="the first message")
        await asyncio.sleep(1.0)  # time enough for the pulls the limit must hold back
        (info,) = [v for k, v in c.running_info()["mqTable"].items() if k.startswith("FlowBytes@")]
        # Pulls go on while under 100 KiB are cached (3 bodies at most) and bring 2 each.
        assert 4 <= info["cachedMsgCount"] <= 5
        release.set()
        await wait_until(lambda: len(got) == 30, message="everything once the listener catches up")
        await c.close()
        await broker.close()
        assert [m.queue_offset for m in got] == list(range(30))

    run(scenario())


def test_a_stuck_message_holds_pulls_back_once_the_cached_offsets_span_too_far(broker: Broker) -> None:
    """RocketMQ's consumeConcurrentlyMaxSpan: the committed offset cannot pass a stuck message, so
    pulling far ahead of it would only grow what a restart redelivers."""

    async def scenario() -> None:
        await broker.create_topic("FlowSpan", 1)
        for i in range(60):
            await broker.send("FlowSpan", f"s-{i}".encode())
        release = asyncio.Event()
        done: list[int] = []

        async def stuck_on_the_first(messages: list[ReceivedMessage]) -> None:
            [m] = messages
            if m.queue_offset == 0:
                await release.wait()
            done.append(m.queue_offset)

        c = consumer(
            broker.namesrv, "GID_flow_span", "FlowSpan", pull_batch_size=4, max_offset_span=10, concurrency=2
        )
        c.listen(stuck_on_the_first)
        await c.start()
        await wait_until(lambda: len(done) >= 10, message="the messages after the stuck one")
        await asyncio.sleep(1.0)  # time enough for the pulls the limit must hold back
        # Pulls go on while the cached offsets span at most 10 (0 to 10) and bring 4 each.
        assert 10 <= len(done) <= 14 and 0 not in done
        release.set()
        await wait_until(lambda: len(done) == 60, message="everything once the first is done")
        await c.close()
        await broker.close()
        assert sorted(done) == list(range(60))

    run(scenario())


# life cycle ------------------------------------------------------------------------------------


def test_a_consumer_never_closed_leaves_no_pending_tasks_or_open_sockets(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        await broker.create_topic("LeakTopic", 2)
        await broker.send("LeakTopic", b"x")
        recorder = Recorder()
        c = consumer(broker.namesrv, "GID_leak", "LeakTopic")
        c.listen(recorder)
        await c.start()
        await wait_until(lambda: recorder.log, message="consumed")
        await broker.close()
        # return without close(): asyncio.run cancels the consumer's tasks and closes the loop

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(scenario())
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []
    assert "Task was destroyed but it is pending" not in caplog.text


@pytest.mark.usefixtures("fast_offset_persistence")
def test_sql92_subscription_delivers_exactly_the_matching_messages(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("enablePropertyFilter=true\n")
    server = StandaloneServer(tmp_path / "data", "-c", str(conf))
    server.start()
    broker = Broker(server)

    async def scenario() -> None:
        await broker.create_topic("SqlTopic", 2)
        for i in range(20):
            props = {"color": ["red", "blue"][i % 2], "size": str(i)}
            await broker.send("SqlTopic", f"s-{i}".encode(), queue_id=i % 2, properties=props)
        recorder = Recorder()
        c = PushConsumer("GID_sql", server.namesrv, consume_from="first")
        c.subscribe("SqlTopic", "color = 'red' AND size >= 10", sql92=True)
        c.listen(recorder)
        await c.start()
        expected = {f"s-{i}".encode() for i in range(10, 20, 2)}
        await wait_until(lambda: len(recorder.log) >= len(expected), message="matching messages")
        await wait_until(
            lambda: broker.all_committed("GID_sql", "SqlTopic", {0: 10, 1: 10}),
            message="offsets past the filtered-out messages",
        )
        await c.close()
        await broker.close()
        assert Counter(recorder.bodies()) == Counter(expected)

    try:
        run(scenario())
    finally:
        server.stop()


@pytest.mark.usefixtures("fast_offset_persistence")
def test_an_online_consumer_follows_an_offset_reset(broker: Broker) -> None:
    """`cometmq group reset` while the consumer runs: the broker tells it (RESET_CONSUMER_CLIENT_OFFSET)
    and it continues from the new offsets, here replaying a queue from its first message."""

    async def scenario() -> None:
        await broker.create_topic("ResetTopic", 1)
        bodies = [f"reset-{i}".encode() for i in range(10)]
        for body in bodies:
            await broker.send("ResetTopic", body)
        recorder = Recorder()
        c = consumer(broker.namesrv, "GID_reset", "ResetTopic")
        c.listen(recorder)
        await c.start()
        await wait_until(lambda: len(recorder.log) >= 10, message="first pass consumed")
        await wait_until(
            lambda: broker.all_committed("GID_reset", "ResetTopic", {0: 10}), message="offset committed"
        )
        async with AdminClient(broker.namesrv) as admin:
            result = await admin.reset_offsets("GID_reset", "ResetTopic", to="earliest")
        assert result.consumers_notified >= 1
        await wait_until(lambda: len(recorder.log) >= 20, message="replay after the reset")
        await c.close()
        assert recorder.bodies() == bodies + bodies  # replayed from offset 0, in order, once
        await broker.close()

    run(scenario())


@pytest.mark.parametrize("group", ["", "bad group", "G" * 256])
@pytest.mark.parametrize("make", [PushConsumer, LitePullConsumer])
def test_an_illegal_consumer_group_is_refused_when_the_consumer_is_made(
    make: Callable[[str, str], object], group: str
) -> None:
    with pytest.raises(CometMQError, match=r"consumer group .*: The specified name"):
        make(group, "127.0.0.1:9876")


def test_breaking_out_of_async_for_commits_the_message_in_hand_and_the_group_resumes_after_it(
    broker: Broker,
) -> None:
    group, topic = "GID_iter_break", "IterBreakTopic"

    async def scenario() -> None:
        await broker.create_topic(topic, 1)
        for i in range(10):
            await broker.send(topic, f"brk-{i}".encode())
        async with consumer(broker.namesrv, group, topic) as first:
            async for message in first:
                if message.body == b"brk-4":
                    break
        assert await broker.committed(group, topic, 0) == 5
        async with consumer(broker.namesrv, group, topic) as second:
            async for message in second:
                assert message.body == b"brk-5"
                break
        assert await broker.committed(group, topic, 0) == 6
        await broker.close()

    run(scenario())
