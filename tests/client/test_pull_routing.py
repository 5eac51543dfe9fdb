"""Which broker of a group a pull goes to: the id the previous answer suggested (suggestWhichBrokerId),
else the group's lowest id; a pull sent to a slave carries no offset commit.

Scripted brokers (a master and a slave of one broker name) answer every pull with no new message and
a suggestion the test sets, and record where each pull arrived.
"""

from __future__ import annotations

import json

from client_support import ScriptedBroker, run, serving

from cometmq.client import LitePullConsumer, PushConsumer, _brokerapi
from cometmq.client._instance import ClientInstance
from cometmq.client.message import MessageQueue
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import (
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from cometmq.protocol.namesrv_headers import RegisterBrokerRequestHeader
from cometmq.protocol.route import DataVersion, RegisterBrokerBody
from cometmq.protocol.subscription import SubscriptionData
from cometmq.remoting import Connection, RemotingServer
from waiting import wait_until

QUEUE = MessageQueue("Scripted", "broker-s", 0)


class MasterAndSlave(ScriptedBroker):
    """Broker ids 0 and 1 of broker name "broker-s". Each answers a pull with PULL_NOT_FOUND and the
    suggestion ``suggest[id]``, and records ``(id, queueId, sysFlag)`` in ``pulls``."""

    def __init__(self, suggest: dict[int, int]) -> None:
        super().__init__("broker-s", [])
        self.suggest = suggest
        self.pulls: list[tuple[int, int, int]] = []
        self.client_ids: set[str] = set()  # from heartbeats: the group's members
        self.slave = RemotingServer(self.handle_slave, "127.0.0.1", 0)

    @property
    def slave_addr(self) -> str:
        return f"127.0.0.1:{self.slave.port}"

    def handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return self.answer(0, request)

    def handle_slave(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return self.answer(1, request)

    def answer(self, broker_id: int, request: RemotingCommand) -> RemotingCommand:
        if request.code == RequestCode.PULL_MESSAGE:
            pulled = PullMessageRequestHeader.decode(request.ext_fields)
            self.pulls.append((broker_id, pulled.queue_id, pulled.sys_flag))
            fields = PullMessageResponseHeader(
                suggest_which_broker_id=self.suggest[broker_id],
                next_begin_offset=pulled.queue_offset,
                min_offset=0,
                max_offset=0,
            ).encode()
            return request.response(ResponseCode.PULL_NOT_FOUND, None, fields)
        if request.code in (RequestCode.GET_MIN_OFFSET, RequestCode.GET_MAX_OFFSET):
            return request.response(ResponseCode.SUCCESS, None, OffsetResponseHeader(offset=0).encode())
        if request.code == RequestCode.QUERY_CONSUMER_OFFSET:
            return request.response(ResponseCode.QUERY_NOT_FOUND, "no offset")
        if request.code == RequestCode.HEART_BEAT:
            self.client_ids.add(json.loads(request.body)["clientID"])
        if request.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            body = json.dumps({"consumerIdList": sorted(self.client_ids)}).encode()
            return request.response(body=body)
        return request.response()

    async def start(self, namesrv: str, topic: str) -> None:
        await super().start(namesrv, topic)
        await self.slave.start()
        header = RegisterBrokerRequestHeader(
            broker_name=self.name,
            broker_addr=self.slave_addr,
            cluster_name="DefaultCluster",
            ha_server_addr="127.0.0.1:1",
            broker_id=1,
        )
        body = RegisterBrokerBody(DataVersion(timestamp=1, counter=1), {}).encode()
        response = await self.namesrv_client.invoke(
            namesrv, RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=body)
        )
        assert response.code == ResponseCode.SUCCESS, response.remark

    async def stop(self) -> None:
        await super().stop()
        await self.slave.stop()


def assert_each_queue_moved_to_the_slave(pulls: list[tuple[int, int, int]]) -> None:
    """Each queue's first pull went to the master, which suggested the slave, and every later one to
    the slave."""
    by_queue: dict[int, list[int]] = {}
    for broker_id, queue_id, _ in pulls:
        by_queue.setdefault(queue_id, []).append(broker_id)
    for queue_id, ids in by_queue.items():
        assert ids[0] == 0 and set(ids[1:]) <= {1}, (queue_id, ids)
    assert any(len(ids) > 1 for ids in by_queue.values())


def test_the_next_pull_goes_to_the_suggested_broker_and_commits_nothing_there() -> None:
    async def scenario() -> None:
        async with serving(MasterAndSlave({0: 1, 1: 0})) as (namesrv, brokers):
            instance = ClientInstance(namesrv)
            try:
                await instance.fetch_route("Scripted")
                pull_from: dict[MessageQueue, int] = {}
                flags = _brokerapi.PULL_COMMIT_OFFSET | _brokerapi.PULL_SUBSCRIPTION
                for _ in range(3):
                    await _brokerapi.pull(
                        instance,
                        QUEUE,
                        "G",
                        SubscriptionData("Scripted"),
                        0,
                        1,
                        sys_flag=flags,
                        commit_offset=5,
                        pull_from=pull_from,
                    )
            finally:
                await instance.close()
            # The master suggests the slave, the slave suggests the master; only the master commits.
            assert brokers.pulls == [(0, 0, flags), (1, 0, _brokerapi.PULL_SUBSCRIPTION), (0, 0, flags)]

    run(scenario())


def test_a_suggested_broker_that_is_not_registered_falls_back_to_the_lowest_id() -> None:
    async def scenario() -> None:
        async with serving(MasterAndSlave({0: 2, 1: 2})) as (namesrv, brokers):
            instance = ClientInstance(namesrv)
            try:
                await instance.fetch_route("Scripted")
                pull_from = {QUEUE: 2}  # no broker 2: the master, the lowest id
                await _brokerapi.pull(
                    instance, QUEUE, "G", SubscriptionData("Scripted"), 0, 1, pull_from=pull_from
                )
                assert instance.read_addr("broker-s", 2) == (brokers.addr, False)
                instance._broker_addrs["broker-s"].pop(0)  # the master leaves: the slave is the lowest
                await _brokerapi.pull(
                    instance, QUEUE, "G", SubscriptionData("Scripted"), 0, 1, pull_from=pull_from
                )
            finally:
                await instance.close()
            assert [broker_id for broker_id, _, _ in brokers.pulls] == [0, 1]

    run(scenario())


def test_a_lite_pull_consumer_follows_the_suggestion() -> None:
    async def scenario() -> None:
        async with serving(MasterAndSlave({0: 1, 1: 1})) as (namesrv, brokers):
            consumer = LitePullConsumer("G", namesrv, consume_from="first")
            consumer.assign([QUEUE])
            await consumer.start()
            try:
                await wait_until(lambda: len(brokers.pulls) >= 3, message="three pulls")
            finally:
                await consumer.close()
            assert_each_queue_moved_to_the_slave(brokers.pulls)

    run(scenario())


def test_a_push_consumer_follows_the_suggestion() -> None:
    async def scenario() -> None:
        async with serving(MasterAndSlave({0: 1, 1: 1})) as (namesrv, brokers):
            consumer = PushConsumer("G", namesrv, consume_from="first")
            consumer.subscribe("Scripted")
            consumer.listen(lambda messages: None)
            await consumer.start()
            try:
                await wait_until(lambda: len(brokers.pulls) >= 3, message="three pulls")
            finally:
                await consumer.close()
            assert_each_queue_moved_to_the_slave(brokers.pulls)

    run(scenario())
