"""Consumers read a broker group from its slave while the master is away, and return to the master.

Real brokers in this process, over real sockets: a master (brokerId 0, ASYNC_MASTER) and its slave
(brokerId 1, brokerRole SLAVE, copying the master's commit log), with the same brokerName, registered
with one name server. The consumers are held while a batch is sent to the master (a push consumer by its
listener, with room for one message a queue; a lite pull consumer paused), so that when the master stops
they can read that batch, all but the message a queue pulled ahead, only from the slave.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from client_support import run, send_request

from cometmq.broker import Broker, BrokerConfig
from cometmq.client import AdminClient, LitePullConsumer, MessageQueue, PushConsumer
from cometmq.client import consumer as consumer_module
from cometmq.client import litepull as litepull_module
from cometmq.client._instance import ClientInstance
from cometmq.client.message import ReceivedMessage
from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import CreateTopicRequestHeader, QueryConsumerOffsetRequestHeader
from cometmq.protocol.route import MASTER_ID
from cometmq.remoting import RemotingClient
from waiting import wait_until

TOPIC = "SlaveReads"
QUEUES = 2
BROKER_NAME = "broker-ha"


async def start_broker(data_dir: Path, namesrv: str, broker_id: int) -> Broker:
    """A broker of group BROKER_NAME in ``data_dir``; a slave finds its master through the name server."""
    config = BrokerConfig()
    config.update(
        {
            "storePathRootDir": str(data_dir),
            "listenPort": 0,
            "listenHost": "127.0.0.1",
            "namesrvAddr": namesrv,
            "brokerName": BROKER_NAME,
            "brokerId": broker_id,
            "brokerRole": "ASYNC_MASTER" if broker_id == MASTER_ID else "SLAVE",
            "mappedFileSizeCommitLog": 1 << 20,
            "mappedFileSizeConsumeQueue": 20 * 1000,
        }
    )
    # A slave copies its master's topics and offsets at this period.
    broker = Broker(config, slave_sync_period_s=0.2)
    await broker.start()
    return broker


def addr_of(broker: Broker) -> str:
    return f"127.0.0.1:{broker.port}"


class Cluster:
    """The name server, the master and the slave, and raw requests to either broker."""

    def __init__(self, base: Path, namesrv: NameServer) -> None:
        self.base = base
        self.namesrv = f"127.0.0.1:{namesrv.port}"
        self.client = RemotingClient()
        self.master: Broker | None = None
        self.slave: Broker | None = None

    async def start_master(self) -> str:
        self.master = await start_broker(self.base / "master", self.namesrv, MASTER_ID)
        return addr_of(self.master)

    async def stop_master(self) -> None:
        assert self.master is not None
        await self.master.stop()
        self.master = None

    async def create_topic(self, addr: str) -> None:
        header = CreateTopicRequestHeader(
            topic=TOPIC,
            default_topic="TBW102",
            read_queue_nums=QUEUES,
            write_queue_nums=QUEUES,
            perm=6,
            topic_filter_type="SINGLE_TAG",
            order=False,
        )
        request = RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=header.encode())
        response = await self.client.invoke(addr, request, timeout=10)
        assert response.code == ResponseCode.SUCCESS, response.remark

    async def send(self, bodies: list[bytes]) -> None:
        """Each body to queue ``i % QUEUES`` of the master, in order."""
        assert self.master is not None
        for i, body in enumerate(bodies):
            request = send_request(TOPIC, body, i % QUEUES)
            response = await self.client.invoke(addr_of(self.master), request, timeout=10)
            assert response.code == ResponseCode.SUCCESS, response.remark

    def slave_caught_up(self) -> bool:
        assert self.master is not None and self.slave is not None
        return self.slave.store.replica_end() == self.master.store.replica_end()

    async def committed(self, addr: str, group: str, queue_id: int) -> int | None:
        header = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=TOPIC, queue_id=queue_id)
        request = RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, ext_fields=header.encode())
        response = await self.client.invoke(addr, request, timeout=10)
        return int(response.ext_fields["offset"]) if response.code == ResponseCode.SUCCESS else None

    async def all_committed(self, addr: str, group: str, ends: list[int]) -> bool:
        return all([await self.committed(addr, group, q) == end for q, end in enumerate(ends)])

    async def route_ids_are(self, ids: set[int]) -> bool:
        """Whether the name server routes the topic to exactly the broker ids ``ids``."""
        async with AdminClient(self.namesrv) as admin:
            route = await admin.topic_route(TOPIC)
        return {i for b in route.broker_datas if b.broker_name == BROKER_NAME for i in b.broker_addrs} == ids


@asynccontextmanager
async def cluster(base: Path) -> AsyncIterator[Cluster]:
    """A master and its slave, both registered, and the topic on both."""
    namesrv = NameServer(host="127.0.0.1", port=0)
    await namesrv.start()
    nodes = Cluster(base, namesrv)
    try:
        master_addr = await nodes.start_master()
        await nodes.create_topic(master_addr)
        nodes.slave = await start_broker(base / "slave", nodes.namesrv, 1)
        slave = nodes.slave
        await wait_until(lambda: slave.topics.get(TOPIC) is not None, message="the topic on the slave")
        await wait_until(lambda: nodes.route_ids_are({0, 1}), message="the route lists master and slave")
        yield nodes
    finally:
        await nodes.client.close()
        for broker in (nodes.master, nodes.slave):
            if broker is not None:
                await broker.stop()
        await namesrv.stop()


class HeldConsumers:
    """Groups <prefix>-push and <prefix>-lite reading TOPIC from the first message: a push consumer
    that its listener can hold, with room for one message a queue, and a lite pull consumer that can
    be paused, pulling one message at a time."""

    def __init__(self, nodes: Cluster, prefix: str, **lite_options: Any) -> None:
        self.nodes = nodes
        self.pushed: set[bytes] = set()
        self.polled: set[bytes] = set()
        self._gate = asyncio.Event()
        self._gate.set()
        self._held: set[MessageQueue] = set()
        self.push = PushConsumer(
            f"{prefix}-push",
            nodes.namesrv,
            consume_from="first",
            pull_batch_size=1,
            max_cached_messages_per_queue=1,
        )
        self.push.subscribe(TOPIC)
        self.push.listen(self._on_messages)
        self.lite = LitePullConsumer(
            f"{prefix}-lite", nodes.namesrv, consume_from="first", pull_batch_size=1, **lite_options
        )
        self.lite.subscribe(TOPIC)
        self._poller: asyncio.Task[None] | None = None

    async def _on_messages(self, messages: list[ReceivedMessage]) -> None:
        self.pushed.update(m.body for m in messages)
        await self._gate.wait()

    async def _poll_forever(self) -> None:
        while True:
            self.polled.update(m.body for m in await self.lite.poll(0.2))

    async def start(self) -> None:
        await self.push.start()
        await self.lite.start()
        self._poller = asyncio.create_task(self._poll_forever())

    def have_read(self, bodies: list[bytes]) -> bool:
        return self.pushed >= set(bodies) and self.polled >= set(bodies)

    async def stop_master_while_held(self, during: list[bytes]) -> None:
        """Hold both while *during* reaches the master and its slave; then stop the master (the name
        server keeps the group's queues for its slave)."""
        self._gate.clear()
        self._held = self.lite.assignment()
        self.lite.pause(self._held)
        await self.nodes.send(during)
        await wait_until(self.nodes.slave_caught_up, message="the slave to hold the batch")
        await self.nodes.stop_master()
        # Only what a queue pulled ahead (one message) came from the master.
        assert len(self.pushed & set(during)) <= QUEUES and len(self.polled & set(during)) == 0

    def release(self) -> None:
        self._gate.set()
        self.lite.resume(self._held)

    async def close(self) -> None:
        self._gate.set()
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        await self.lite.close()
        await self.push.close()


def bodies(tag: str, count: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(count)]


def ends(count: int) -> list[int]:
    """Each queue's end after ``count`` messages sent round-robin from queue 0."""
    return [(count + QUEUES - 1 - q) // QUEUES for q in range(QUEUES)]


def test_consumers_read_from_the_slave_while_the_master_is_away_and_return_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Quicker commits, quicker retries of the pulls the master's going cut short, and shorter holds of
    # pulls on the slave (which gets no new message to answer them with).
    monkeypatch.setattr(consumer_module, "PERSIST_INTERVAL_S", 0.2)
    monkeypatch.setattr(consumer_module, "PULL_ERROR_BACKOFF_S", 0.1)
    monkeypatch.setattr(consumer_module, "LONG_POLL_SUSPEND_MS", 300)
    monkeypatch.setattr(litepull_module, "PULL_RETRY_DELAY_S", 0.1)
    monkeypatch.setattr(litepull_module, "LONG_POLL_SUSPEND_MS", 300)
    first, during, after = bodies("first", 6), bodies("during", 12), bodies("after", 6)

    async def scenario() -> None:
        async with cluster(tmp_path) as nodes:
            assert nodes.master is not None and nodes.slave is not None
            slave_addr = addr_of(nodes.slave)

            held = HeldConsumers(nodes, "slave-reads", auto_commit_interval=0.2)
            late_pushed: set[bytes] = set()

            async def on_late(messages: list[ReceivedMessage]) -> None:
                late_pushed.update(m.body for m in messages)

            late = PushConsumer("slave-reads-late", nodes.namesrv, consume_from="first")  # joins later
            late.subscribe(TOPIC)
            late.listen(on_late)
            await nodes.send(first)
            await held.start()
            consumers: list[Any] = [held.push._instance, held.lite.instance]
            try:
                await wait_until(lambda: held.have_read(first), message="first batch")
                await held.stop_master_while_held(during)
                await wait_until(lambda: nodes.route_ids_are({1}), message="the route lists the slave only")
                for instance in consumers:
                    await instance.refresh_routes()
                held.release()
                await wait_until(lambda: held.have_read(during), message="read from the slave")
                # A group that joins now finds the queues, its members and its start on the slave.
                await late.start()
                consumers.append(late._instance)
                await wait_until(
                    lambda: late_pushed >= set(first + during), message="a late group reads the slave"
                )
                # Offsets were committed to the slave, which alone could take them.
                count = len(first) + len(during)
                await wait_until(
                    lambda: nodes.all_committed(slave_addr, "slave-reads-push", ends(count)),
                    message="the push consumer's offsets on the slave",
                    timeout=30,
                )
                await wait_until(
                    lambda: nodes.all_committed(slave_addr, "slave-reads-lite", ends(count)),
                    message="the lite pull consumer's offsets on the slave",
                )

                # The master returns with its disk, on a new port.
                master_addr = await nodes.start_master()
                await wait_until(lambda: nodes.route_ids_are({0, 1}), message="the master registered again")
                for instance in consumers:
                    await instance.refresh_routes()
                # The offsets committed to the slave are committed to the master again.
                await wait_until(
                    lambda: nodes.all_committed(master_addr, "slave-reads-push", ends(count)),
                    message="the push consumer's slave-held offsets on the master",
                )
                await wait_until(
                    lambda: nodes.all_committed(master_addr, "slave-reads-lite", ends(count)),
                    message="the lite pull consumer's slave-held offsets on the master",
                )
                await nodes.send(after)
                await wait_until(
                    lambda: held.have_read(after) and late_pushed >= set(after),
                    message="read from the master",
                )
                count += len(after)
                await wait_until(
                    lambda: nodes.all_committed(master_addr, "slave-reads-push", ends(count)),
                    message="the push consumer's offsets on the master",
                    timeout=30,
                )
                await wait_until(
                    lambda: nodes.all_committed(master_addr, "slave-reads-lite", ends(count)),
                    message="the lite pull consumer's offsets on the master",
                )
            finally:
                await held.close()
                await late.close()
            everything = set(first) | set(during) | set(after)
            assert held.pushed == everything
            assert held.polled == everything
            assert late_pushed == everything

    run(scenario())


def test_consumers_whose_master_stops_read_on_from_the_slave_before_any_periodic_route_refresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default poll_name_server_interval (30 s): the consumers learn that the master went from the
    # route they look up when their pulls cannot reach it. The periodic refreshes are counted, to show
    # that none had run by the time the slave had served the batch.
    monkeypatch.setattr(consumer_module, "PULL_ERROR_BACKOFF_S", 0.1)
    monkeypatch.setattr(litepull_module, "PULL_RETRY_DELAY_S", 0.1)
    periodic_refreshes: list[ClientInstance] = []
    refresh_routes = ClientInstance.refresh_routes

    async def counted_refresh(instance: ClientInstance) -> None:
        periodic_refreshes.append(instance)
        await refresh_routes(instance)

    monkeypatch.setattr(ClientInstance, "refresh_routes", counted_refresh)
    first, during = bodies("first", 4), bodies("during", 8)

    async def scenario() -> None:
        async with cluster(tmp_path) as nodes:
            held = HeldConsumers(nodes, "unreachable")
            await nodes.send(first)
            await held.start()
            try:
                await wait_until(lambda: held.have_read(first), message="first batch")
                await held.stop_master_while_held(during)
                held.release()
                await wait_until(lambda: held.have_read(during), message="read from the slave")
                assert periodic_refreshes == []
            finally:
                await held.close()

    run(scenario())


def test_a_message_is_found_by_key_on_the_slave_while_the_master_is_away(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as nodes:
            assert nodes.master is not None
            request = send_request(TOPIC, b"keyed", 0, {"KEYS": "order-7"})
            response = await nodes.client.invoke(addr_of(nodes.master), request, timeout=10)
            assert response.code == ResponseCode.SUCCESS, response.remark
            await wait_until(nodes.slave_caught_up, message="the slave to copy the message")
            await nodes.stop_master()
            await wait_until(lambda: nodes.route_ids_are({1}), message="the route to list the slave only")
            async with AdminClient(nodes.namesrv) as admin:
                found = await admin.query_message(TOPIC, "order-7")
            assert [record.body for record in found] == [b"keyed"]

    run(scenario())
