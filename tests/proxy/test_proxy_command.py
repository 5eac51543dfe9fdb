"""``cometmq proxy`` in front of a cluster, and the proxy flags of ``cometmq standalone``."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from proxy_support import Stub, client_metadata, message, new_client_id, signed

from cometmq.client import blocking
from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy import service_pb2 as pb
from processes import (
    TEST_BROKER_CONF,
    ServerProcess,
    cometmq,
    free_port,
    proxy_address,
    standalone_args,
    start_standalone,
)
from secured_servers import ACL_TOPIC, PLAIN_ACL, READER, WRITER, write_conf


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A standalone serving no proxy, as the cluster a ``cometmq proxy`` stands in front of."""
    process, namesrv = start_standalone(tmp_path_factory.mktemp("cluster") / "data")
    try:
        yield process, namesrv
    finally:
        process.terminate()


def test_standalone_serves_no_proxy_on_port_zero(cluster: tuple[ServerProcess, str]) -> None:
    process, _ = cluster
    assert ", proxy " not in process.ready_line


def test_proxy_command_serves_a_cluster(cluster: tuple[ServerProcess, str], tmp_path: Path) -> None:
    _, namesrv = cluster
    topic = "proxy-command-topic"
    with blocking.AdminClient(namesrv) as admin:
        admin.create_topic(topic, 2)
    proxy = ServerProcess(["proxy", "--namesrv", namesrv, "--port", "0"], tmp_path / "proxy.log")
    try:
        line = proxy.wait_ready("CometMQ proxy ready:")
        assert "(plaintext)" in line and namesrv in line
        with grpc.insecure_channel(proxy_address(proxy)) as channel:
            stub = Stub(channel)  # type: ignore[no-untyped-call]
            route = stub.QueryRoute(pb.QueryRouteRequest(topic=v2.Resource(name=topic)))
            assert route.status.code == v2.OK
            assert {queue.broker.name for queue in route.message_queues} == {"broker-a"}
            sent = stub.SendMessage(
                pb.SendMessageRequest(messages=[message(topic)]), metadata=client_metadata(new_client_id())
            )
            assert sent.status.code == v2.OK, sent.status
    finally:
        assert proxy.terminate() == 0


def test_proxy_command_needs_a_name_server() -> None:
    result = cometmq("proxy", "--port", "0")
    assert result.returncode != 0
    assert "--namesrv" in result.stderr


def test_standalone_names_the_flag_of_a_proxy_port_taken(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = cometmq(*standalone_args(tmp_path / "data", "--proxy-port", str(port)))
    assert result.returncode != 0
    assert "--proxy-port" in result.stderr


def test_proxy_command_checks_signatures_against_its_access_control_file(
    cluster: tuple[ServerProcess, str], tmp_path: Path
) -> None:
    _, namesrv = cluster
    with blocking.AdminClient(namesrv) as admin:
        admin.create_topic(ACL_TOPIC, 2)
    (tmp_path / "plain_acl.yml").write_text(PLAIN_ACL)
    conf = write_conf(
        tmp_path / "proxy.conf",
        aclEnable="true",
        plainAclFile=str(tmp_path / "plain_acl.yml"),
        authConfigPath=str(tmp_path / "auth"),
    )
    proxy = ServerProcess(
        ["proxy", "--namesrv", namesrv, "--port", "0", "-c", str(conf)], tmp_path / "proxy.log"
    )
    try:
        assert "signatures checked" in proxy.wait_ready("CometMQ proxy ready:")
        with grpc.insecure_channel(proxy_address(proxy)) as channel:
            stub = Stub(channel)  # type: ignore[no-untyped-call]
            request = pb.SendMessageRequest(messages=[message(ACL_TOPIC)])
            assert stub.SendMessage(request, metadata=signed(None)).status.code == v2.UNAUTHORIZED
            assert stub.SendMessage(request, metadata=signed(READER)).status.code == v2.UNAUTHORIZED
            allowed = stub.SendMessage(request, metadata=signed(WRITER))
            assert allowed.status.code == v2.OK, allowed.status
    finally:
        assert proxy.terminate() == 0


def test_cluster_up_runs_a_proxy_in_front_of_its_brokers(tmp_path: Path) -> None:
    conf = tmp_path / "small.conf"
    conf.write_text(TEST_BROKER_CONF)
    ports = ["--namesrv-port", "0", "--base-port", "0", "--proxy-port", "0"]
    args = ["cluster", "up", "--groups", "2", "--slaves", "0", *ports, "--data-dir", str(tmp_path / "c")]
    cluster = ServerProcess([*args, "-c", str(conf)], tmp_path / "cluster.log")
    try:
        line = cluster.wait_ready("CometMQ cluster ready:", timeout=90)
        namesrv = line.split("namesrv ", 1)[1].split(",", 1)[0]
        with blocking.AdminClient(namesrv) as admin:
            admin.create_topic("proxy-cluster-topic", 2)
        with grpc.insecure_channel(proxy_address(cluster)) as channel:
            stub = Stub(channel)  # type: ignore[no-untyped-call]
            route = stub.QueryRoute(pb.QueryRouteRequest(topic=v2.Resource(name="proxy-cluster-topic")))
            assert route.status.code == v2.OK
            assert {queue.broker.name for queue in route.message_queues} == {"broker-a", "broker-b"}
    finally:
        assert cluster.terminate(timeout=90) == 0
    assert (tmp_path / "c" / "proxy" / "proxy.log").exists()
