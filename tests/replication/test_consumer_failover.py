"""A consumer group reads on from the slave while its master is down, and returns to the master when it is
back; the messages consumed are every message acknowledged. A name server, a master and its slave run as
separate processes; the consumer is CometMQ's PushConsumer in one test, the official C++ client's in the
other. The consumer is held at a gate partway through the messages (its cache full, so it pulls no more),
the master is killed with SIGKILL once its slave holds everything, and the gate opens: what is left can
only be read from the slave, to which the consumer also commits its offsets. The master is then started
again on its own data directory, more messages are sent to it, and the consumer reads them and commits its
offsets there.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from _pair import BrokerNode, create_topic_on_both, replicated, send, start_namesrv

from cometmq.client import AdminClient, PushConsumer
from cometmq.client import consumer as consumer_module
from cometmq.client.message import ReceivedMessage
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import QueryConsumerOffsetRequestHeader
from cometmq.protocol.route import MASTER_ID
from cometmq.remoting import RemotingClient
from processes import read_cpp_result
from waiting import wait_until, wait_until_blocking

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
from crash_support import CPP_SCENARIOS

TOPIC = "ConsumerFailover"
QUEUES = 2
SENDERS = 8
SLAVE_ID = 1


class Cluster:
    """The name server's address, the two brokers, and every message the master acknowledged."""

    def __init__(self, namesrv: str, master: BrokerNode, slave: BrokerNode) -> None:
        self.namesrv = namesrv
        self.master = master
        self.slave = slave
        self.acknowledged: list[bytes] = []
        self.ends = [0] * QUEUES  # each queue's end after the acknowledged messages

    async def send(self, client: RemotingClient, tag: str, count: int) -> None:
        """``count`` messages to the master, round-robin over the queues, from a few senders at once."""
        numbers = iter(range(count))

        async def sender() -> None:
            for i in numbers:
                body = f"{tag}-{i}".encode()
                response, sent = await send(client, self.master.addr, TOPIC, i % QUEUES, body, {})
                assert sent is not None, (response.code, response.remark)
                self.acknowledged.append(body)
                self.ends[sent.queue_id] = max(self.ends[sent.queue_id], sent.queue_offset + 1)

        await asyncio.gather(*(sender() for _ in range(SENDERS)))

    async def kill_master(self, client: RemotingClient) -> None:
        """SIGKILL the master once its slave holds every message, and wait for the name server to route
        the topic to the slave alone."""
        await wait_until(lambda: replicated(client, self.master), message="the slave to hold every message")
        self.master.kill9()
        await wait_until(lambda: self.route_ids_are({SLAVE_ID}), message="the route to list the slave only")

    async def route_ids_are(self, ids: set[int]) -> bool:
        async with AdminClient(self.namesrv) as admin:
            route = await admin.topic_route(TOPIC)
        return {i for broker in route.broker_datas for i in broker.broker_addrs} == ids

    async def committed_everything(self, client: RemotingClient, addr: str, group: str) -> bool:
        """Whether ``group``'s offsets on the broker at ``addr`` are the queues' ends."""
        offsets: list[int | None] = []
        for queue_id in range(QUEUES):
            header = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=TOPIC, queue_id=queue_id)
            request = RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, ext_fields=header.encode())
            response = await client.invoke(addr, request, timeout=10)
            found = response.code == ResponseCode.SUCCESS
            offsets.append(int(response.ext_fields["offset"]) if found else None)
        return offsets == self.ends


@contextmanager
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    namesrv, namesrv_addr = start_namesrv(tmp_path)
    # ASYNC_MASTER: the master started again takes sends before its slave has found it. What it
    # acknowledged before the kill is exactly what the slave holds: the kill waits for the slave to catch
    # up, and nothing is sent while the master is away.
    master = BrokerNode(tmp_path, "master", namesrv_addr, brokerRole="ASYNC_MASTER")
    # No haMasterAddress: the slave finds its master's HA address through the name server.
    slave = BrokerNode(tmp_path, "slave", namesrv_addr, brokerRole="SLAVE", brokerId=SLAVE_ID)
    nodes = Cluster(namesrv_addr, master, slave)

    async def create_topic() -> None:
        client = RemotingClient()
        try:
            await create_topic_on_both(client, master.addr, slave.addr, TOPIC, QUEUES)
        finally:
            await client.close()

    try:
        master.start()
        slave.start()
        asyncio.run(create_topic())
        yield nodes
    finally:
        slave.stop()
        master.stop()
        namesrv.terminate()


def repeated(bodies: list[bytes]) -> dict[bytes, int]:
    return {body: n for body, n in Counter(bodies).items() if n > 1}


BEFORE, PAUSE_AT, AFTER = 3000, 600, 300


def test_push_consumer_reads_on_from_the_slave_and_returns_to_the_master(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Quicker commits, quicker retries of the pulls the master's death cuts short, and shorter holds of
    # pulls on the slave (which answers a consumer that caught up by pointing it at the master).
    monkeypatch.setattr(consumer_module, "PERSIST_INTERVAL_S", 0.2)
    monkeypatch.setattr(consumer_module, "PULL_ERROR_BACKOFF_S", 0.2)
    monkeypatch.setattr(consumer_module, "LONG_POLL_SUSPEND_MS", 500)
    group = "failover-push"
    consumed: list[bytes] = []

    async def scenario(nodes: Cluster) -> None:
        gate = asyncio.Event()

        async def on_messages(messages: list[ReceivedMessage]) -> None:
            consumed.extend(m.body for m in messages)
            if len(consumed) >= PAUSE_AT:
                await gate.wait()

        # A consumer learns that the master left from the route it looks up when its pulls cannot reach
        # the master, but that the master came back only at its periodic route refresh (RocketMQ's
        # pollNameServerInterval, 30 s by default): shortened so that the test does not wait for it.
        consumer = PushConsumer(
            group,
            nodes.namesrv,
            consume_from="first",
            max_cached_messages_per_queue=64,
            poll_name_server_interval=0.5,
        )
        consumer.subscribe(TOPIC)
        consumer.listen(on_messages)
        client = RemotingClient()
        try:
            await nodes.send(client, "before", BEFORE)
            await consumer.start()
            await wait_until(lambda: len(consumed) >= PAUSE_AT, message="the consumer to reach the gate")
            await nodes.kill_master(client)
            gate.set()
            await wait_until(
                lambda: set(consumed) >= set(nodes.acknowledged), message="the rest read from the slave"
            )
            await wait_until(
                lambda: nodes.committed_everything(client, nodes.slave.addr, group),
                message="the offsets committed to the slave",
            )

            await asyncio.to_thread(nodes.master.start)
            await wait_until(
                lambda: nodes.route_ids_are({MASTER_ID, SLAVE_ID}), message="the master registered again"
            )
            await nodes.send(client, "after", AFTER)
            await wait_until(
                lambda: set(consumed) >= set(nodes.acknowledged), message="the messages sent after the outage"
            )
            await wait_until(
                lambda: nodes.committed_everything(client, nodes.master.addr, group),
                message="the offsets committed to the master",
            )
        finally:
            gate.set()
            await consumer.close()
            await client.close()

    with cluster(tmp_path) as nodes:
        asyncio.run(scenario(nodes))
    assert set(consumed) == set(nodes.acknowledged)
    # A consumer that keeps its queues through the outage reads on from its in-memory offsets
    # (docs/client.md, "Delivery guarantees"): nothing comes twice.
    assert repeated(consumed) == {}


CPP_BEFORE, CPP_PAUSE_AT, CPP_AFTER = 4000, 300, 300


@pytest.mark.interop
def test_cpp_push_consumer_reads_on_from_the_slave_and_returns_to_the_master(tmp_path: Path) -> None:
    group = "failover-cpp"
    gate = tmp_path / "gate"
    gate.mkdir()
    # The C++ client caches up to 1000 messages a queue (a limit its C API cannot change), pulled from the
    # master before the kill; CPP_BEFORE leaves more than that for the slave.
    assert CPP_BEFORE > CPP_PAUSE_AT + QUEUES * 1100
    # The C++ client refreshes its routes every 30 s, a period none of its settings changes, and gives up
    # a pull the killed master held only when the pull times out (30 s): it goes on from the slave, and
    # back to the master, within about 30 s each.
    refresh_timeout = 120.0

    async def send_batch(nodes: Cluster, tag: str, count: int) -> None:
        client = RemotingClient()
        try:
            await nodes.send(client, tag, count)
        finally:
            await client.close()

    async def kill_master(nodes: Cluster) -> None:
        client = RemotingClient()
        try:
            await nodes.kill_master(client)
        finally:
            await client.close()

    async def committed_everything(nodes: Cluster, node: BrokerNode) -> None:
        client = RemotingClient()
        try:
            await wait_until(
                lambda: nodes.committed_everything(client, node.addr, group),
                message=f"the C++ consumer's offsets on the {node.name}",
                timeout=refresh_timeout,
            )
        finally:
            await client.close()

    with cluster(tmp_path) as nodes, (tmp_path / "cpp-consumer.err").open("w+") as errors:
        asyncio.run(send_batch(nodes, "before", CPP_BEFORE))
        # stderr (the C++ library's chatter too) to a file: a full pipe would block the consumer.
        consumer = subprocess.Popen(
            [
                sys.executable, str(CPP_SCENARIOS), "push-consume", "--namesrv", nodes.namesrv,
                "--topic", TOPIC, "--group", group, "--pause-after", str(CPP_PAUSE_AT), "--gate", str(gate),
                "--timeout", "400",
            ],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )  # fmt: skip
        try:
            wait_until_blocking(
                lambda: (gate / "paused").exists(), message="the C++ consumer at the gate", timeout=60
            )
            asyncio.run(kill_master(nodes))
            (gate / "resume").touch()
            asyncio.run(committed_everything(nodes, nodes.slave))

            nodes.master.start()
            asyncio.run(send_batch(nodes, "after", CPP_AFTER))
            asyncio.run(committed_everything(nodes, nodes.master))
            (gate / "stop").touch()
            stdout, _ = consumer.communicate(timeout=60)
        finally:
            if consumer.poll() is None:
                consumer.kill()
                consumer.communicate()
        errors.seek(0)
        stderr = errors.read()
    result = read_cpp_result(stdout, consumer.returncode, stderr)
    assert result["ok"], f"{result['errors']}\nstderr:\n{stderr[-3000:]}"
    consumed = [bytes.fromhex(m["body_hex"]) for m in result["messages"]]
    assert set(consumed) == set(nodes.acknowledged)
    # Its queues stay its own through the outage (one consumer): it reads on from its in-memory offsets.
    assert repeated(consumed) == {}
