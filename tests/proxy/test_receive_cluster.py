"""The consuming calls of a proxy in front of two brokers: a receive pops the broker its queue names, and
an ack finds the broker by its receipt handle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_receive import (
    METADATA,
    ack,
    from_first_message,
    proxy_in_process,
    query_assignment,
    receive_request,
    receive_until,
    run,
    send,
    topic_and_group,
)

from cometmq.client import Message
from cometmq.proxy import definition_pb2, service_pb2
from cometmq.proxy._receive import parse_receipt_handle
from processes import TEST_BROKER_CONF, ServerProcess, free_port
from waiting import wait_until

v2 = definition_pb2
pb = service_pb2


class TwoBrokers:
    """A name server and brokers broker-a and broker-b, each a process of its own."""

    def __init__(self, base: Path) -> None:
        conf = base / "broker.conf"
        conf.write_text(TEST_BROKER_CONF)
        port = free_port()
        self.namesrv = f"127.0.0.1:{port}"
        args = ["namesrv", "--host", "127.0.0.1", "--port", str(port)]
        self.servers = {"namesrv": ServerProcess(args, base / "namesrv.log")}
        try:
            self.servers["namesrv"].wait_ready("CometMQ namesrv ready:")
            for name in ("broker-a", "broker-b"):
                args = [
                    "broker",
                    "--namesrv-addr",
                    self.namesrv,
                    "-c",
                    str(conf),
                    "--data-dir",
                    str(base / name),
                ]
                args += ["--host", "127.0.0.1", "--port", str(free_port()), "--broker-name", name]
                self.servers[name] = ServerProcess(args, base / f"{name}.log")
                self.servers[name].wait_ready("CometMQ broker ready:")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for server in reversed(self.servers.values()):
            server.terminate()


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoBrokers]:
    cluster = TwoBrokers(tmp_path_factory.mktemp("two-brokers"))
    try:
        yield cluster
    finally:
        cluster.stop()


async def topic_with_messages(cluster: TwoBrokers, name: str, queues: int, count: int) -> tuple[str, str]:
    """A topic of *queues* queues on each broker holding messages m0, m1, ... (*count* in all), and a
    group's name."""
    topic, group = await topic_and_group(cluster, name, queues)
    await send(cluster, *(Message(topic, b"m%d" % i) for i in range(count)))
    return topic, group


def test_each_brokers_messages_are_received_from_it_and_acked_at_it(two_brokers: TwoBrokers) -> None:
    async def scenario() -> None:
        topic, group = await topic_with_messages(two_brokers, "RecvTwo", 2, 8)
        async with proxy_in_process(two_brokers.namesrv) as stub:
            assignment = await query_assignment(stub, group, topic)
            assert assignment.status.code == v2.OK
            brokers = sorted(a.message_queue.broker.name for a in assignment.assignments)
            assert brokers == ["broker-a", "broker-b"]
            assert {a.message_queue.id for a in assignment.assignments} == {-1}
            received: list[bytes] = []
            for broker in brokers:
                await from_first_message(stub, group, topic, queues=2, broker=broker)
                got = await receive_until(stub, receive_request(group, topic, broker=broker), 4)
                handles = [parse_receipt_handle(m.system_properties.receipt_handle) for m in got]
                assert {handle.broker_name for handle in handles} == {broker}
                answer = await ack(stub, group, topic, *got)
                assert answer.status.code == v2.OK, answer
                received += [m.body for m in got]
        assert sorted(received) == [b"m%d" % i for i in range(8)]

    run(scenario())


def test_a_receive_naming_no_broker_is_served_by_one_that_has_the_topic(two_brokers: TwoBrokers) -> None:
    async def scenario() -> None:
        topic, group = await topic_with_messages(two_brokers, "RecvAny", 1, 4)
        async with proxy_in_process(two_brokers.namesrv) as stub:
            for broker in ("broker-a", "broker-b"):
                await from_first_message(stub, group, topic, queues=1, broker=broker)
            got = await receive_until(stub, receive_request(group, topic, broker="broker-x"), 4)
        assert sorted(m.body for m in got) == [b"m%d" % i for i in range(4)]

    run(scenario())


def test_a_receive_naming_a_broker_that_left_is_served_by_one_still_there(tmp_path: Path) -> None:
    cluster = TwoBrokers(tmp_path)

    async def scenario() -> None:
        topic, group = await topic_with_messages(cluster, "RecvLeft", 1, 4)
        async with proxy_in_process(cluster.namesrv) as stub:
            await from_first_message(stub, group, topic, queues=1, broker="broker-a")
            assert cluster.servers.pop("broker-b").terminate() == 0  # it unregisters as it stops

            async def served_from_broker_a() -> list[v2.Message]:
                responses = [
                    r
                    async for r in stub.ReceiveMessage(
                        receive_request(group, topic, broker="broker-b"), metadata=METADATA, timeout=30
                    )
                ]
                return [r.message for r in responses if r.WhichOneof("content") == "message"]

            # The first receives may still go to the broker that left (the proxy's route names it until
            # a failure to reach it refreshes the route).
            got = await wait_until(served_from_broker_a, message="a receive served by broker-a", interval=0.2)
        assert {parse_receipt_handle(m.system_properties.receipt_handle).broker_name for m in got} == {
            "broker-a"
        }

    try:
        run(scenario())
    finally:
        cluster.stop()
