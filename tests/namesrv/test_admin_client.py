"""AdminClient against a real NameServer and small stand-in brokers on real sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cometmq.client import AdminClient
from cometmq.errors import BrokerError, CometMQError, ConnectionClosedError
from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.route import kv_table_body
from cometmq.protocol.topic_config import TopicConfig
from cometmq.remoting import Connection, Dispatcher, RemotingClient, RemotingServer

from .broker_sim import addr_of
from .broker_sim import register as register_broker

Run = Callable[..., Any]


class StandInBroker:
    """Answers the admin codes the way a broker does and registers its topics with the namesrv."""

    def __init__(self, name: str, namesrv_addr: str, cluster: str = "DefaultCluster") -> None:
        self.name = name
        self.cluster = cluster
        self.namesrv_addr = namesrv_addr
        self.topics: dict[str, TopicConfig] = {"TBW102": TopicConfig("TBW102", 8, 8, 7)}
        self.requests: list[RemotingCommand] = []
        self.counter = 0
        self.tasks: set[asyncio.Task[None]] = set()
        dispatcher = Dispatcher(
            dict.fromkeys(
                (
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    RequestCode.DELETE_TOPIC_IN_BROKER,
                    RequestCode.GET_BROKER_RUNTIME_INFO,
                ),
                self.handle,
            )
        )
        self.server = RemotingServer(dispatcher, "127.0.0.1", 0)
        self.client = RemotingClient()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def start(self) -> None:
        await self.server.start()
        await self.register()

    async def stop(self) -> None:
        for task in list(self.tasks):
            await task
        await self.client.close()
        await self.server.stop()

    async def register(self, delay: float = 0.0) -> None:
        await asyncio.sleep(delay)
        self.counter += 1
        reply = await register_broker(
            self.client,
            self.namesrv_addr,
            broker_name=self.name,
            broker_addr=self.addr,
            cluster=self.cluster,
            topics=self.topics,
            counter=self.counter,
        )
        assert reply.code == ResponseCode.SUCCESS

    async def handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        fields = request.ext_fields
        if request.code == RequestCode.UPDATE_AND_CREATE_TOPIC:
            topic = fields["topic"]
            self.topics[topic] = TopicConfig(
                topic, int(fields["readQueueNums"]), int(fields["writeQueueNums"]), int(fields["perm"])
            )
            # Like CometMQ's broker, re-register a moment *after* replying: the client must wait.
            task = asyncio.get_running_loop().create_task(self.register(delay=0.1))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            return request.response()
        if request.code == RequestCode.DELETE_TOPIC_IN_BROKER:
            if fields["topic"] == "TBW102":
                return request.response(ResponseCode.SYSTEM_ERROR, "system topic")
            self.topics.pop(fields["topic"], None)
            return request.response()
        return request.response(body=kv_table_body({"brokerVersionDesc": "V4_9_8", "putTps": "1.5 0 0"}))


@pytest.fixture
def start_broker(run: Run, namesrv: NameServer) -> Iterator[Callable[..., StandInBroker]]:
    brokers: list[StandInBroker] = []

    def start(name: str, cluster: str = "DefaultCluster") -> StandInBroker:
        broker = StandInBroker(name, addr_of(namesrv), cluster)
        run(broker.start())
        brokers.append(broker)
        return broker

    yield start
    for broker in brokers:
        run(broker.stop())


def test_create_route_list_delete(
    run: Run, namesrv: NameServer, start_broker: Callable[..., StandInBroker]
) -> None:
    a, b = start_broker("broker-a"), start_broker("broker-b")

    async def scenario() -> None:
        async with AdminClient(addr_of(namesrv)) as admin:
            brokers = await admin.create_topic("Orders", queues=3)
            assert sorted(x.broker_name for x in brokers) == ["broker-a", "broker-b"]
            header = a.requests[-1].ext_fields
            assert header == {
                "topic": "Orders",
                "defaultTopic": "TBW102",
                "readQueueNums": "3",
                "writeQueueNums": "3",
                "perm": "6",
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0",
                "order": "false",
            }
            route = await admin.topic_route("Orders")
            assert sorted(q.broker_name for q in route.queue_datas) == ["broker-a", "broker-b"]
            assert {q.write_queue_nums for q in route.queue_datas} == {3}
            assert "Orders" in await admin.topic_list()

            info = await admin.cluster_info()
            assert info.cluster_addr_table == {"DefaultCluster": ["broker-a", "broker-b"]}
            assert (await admin.broker_runtime_info(b.addr))["brokerVersionDesc"] == "V4_9_8"

            await admin.delete_topic("Orders")
            assert "Orders" not in a.topics and "Orders" not in b.topics
            assert "Orders" not in await admin.topic_list()
            with pytest.raises(BrokerError) as raised:
                await admin.topic_route("Orders")
            assert raised.value.code == ResponseCode.TOPIC_NOT_EXIST

    run(scenario())


def test_illegal_topic_name_is_refused_before_sending(
    run: Run, namesrv: NameServer, start_broker: Callable[..., StandInBroker]
) -> None:
    broker = start_broker("broker-a")

    async def scenario() -> None:
        async with AdminClient(addr_of(namesrv)) as admin:
            with pytest.raises(
                CometMQError, match=r'topic "x y" is illegal: The specified topic contains illegal'
            ):
                await admin.create_topic("x y")
        assert broker.requests == []

    run(scenario())


def test_cluster_choice(run: Run, namesrv: NameServer, start_broker: Callable[..., StandInBroker]) -> None:
    admin = AdminClient(addr_of(namesrv))
    run(admin.start())
    try:
        with pytest.raises(CometMQError, match="no broker is registered"):
            run(admin.create_topic("T"))
        start_broker("broker-a", "C1")
        with pytest.raises(CometMQError, match="cluster 'C9' is unknown"):
            run(admin.create_topic("T", cluster="C9"))
        start_broker("broker-b", "C2")
        with pytest.raises(CometMQError, match="several clusters"):
            run(admin.create_topic("T"))
        [only] = run(admin.create_topic("T", cluster="C2"))
        assert only.broker_name == "broker-b"
    finally:
        run(admin.close())


def test_broker_error_carries_code_and_remark(
    run: Run, namesrv: NameServer, start_broker: Callable[..., StandInBroker]
) -> None:
    start_broker("broker-a")

    async def scenario() -> None:
        async with AdminClient(addr_of(namesrv)) as admin:
            with pytest.raises(BrokerError) as raised:
                await admin.delete_topic("TBW102")
            assert (raised.value.code, raised.value.remark) == (1, "system topic")

    run(scenario())


def test_unreachable_namesrv(run: Run, namesrv: NameServer) -> None:
    async def scenario() -> None:
        # The first address refuses connections; the second answers.
        async with AdminClient(f"127.0.0.1:1;{addr_of(namesrv)}") as admin:
            assert await admin.topic_list() == []
        async with AdminClient("127.0.0.1:1") as admin:
            with pytest.raises(ConnectionClosedError, match=r"cannot connect to 127\.0\.0\.1:1"):
                await admin.topic_list()

    run(scenario())
