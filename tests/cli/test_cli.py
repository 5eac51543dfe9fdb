"""The ``cometmq`` command, run as a real process against real servers."""

from __future__ import annotations

import json
import re
import signal
import socket
from pathlib import Path

import pytest

from processes import ServerProcess, broker_address, cometmq, free_port, start_standalone
from waiting import wait_until_blocking

from .cli_support import assert_one_line_error, invoke, pull_request, send


def test_ready_line(standalone: tuple[ServerProcess, str]) -> None:
    server, namesrv = standalone
    assert server.ready_line.startswith(
        f"CometMQ standalone ready: namesrv {namesrv}, broker broker-a at 127.0.0.1:"
    )
    data_dir = server.args[server.args.index("--data-dir") + 1]
    assert f", data in {data_dir}, metrics http://127.0.0.1:" in server.ready_line
    assert re.search(r", dashboard http://127\.0\.0\.1:\d+$", server.ready_line), server.ready_line


def test_a_standalone_without_flags_serves_metrics_on_5557_and_the_dashboard_on_8082() -> None:
    from cometmq.cli._main import build_parser
    from cometmq.cli._servers import STANDALONE_DEFAULTS, _broker_config
    from cometmq.metrics import MetricsExporterType

    args = build_parser().parse_args(["standalone"])
    assert (args.dashboard_port, args.no_dashboard, args.no_metrics) == (8082, False, False)
    config = _broker_config(args, STANDALONE_DEFAULTS)
    assert config.metrics_exporter_type is MetricsExporterType.PROM
    assert config.metrics_prom_exporter_port == 5557
    assert config.trace_topic_enable and config.enable_property_filter


def test_topic_round_trip(namesrv_addr: str) -> None:
    created = cometmq("topic", "create", "RoundTrip", "--queues", "4", "--namesrv", namesrv_addr)
    assert created.returncode == 0, created.stderr
    assert "created topic RoundTrip with 4 queues on broker-a" in created.stdout

    listed = cometmq("topic", "list", "-n", namesrv_addr)
    assert "RoundTrip" in listed.stdout.split()

    route = cometmq("topic", "route", "RoundTrip", "-n", namesrv_addr)
    assert route.returncode == 0, route.stderr
    header, row = route.stdout.strip().splitlines()
    assert header.split() == ["BROKER", "CLUSTER", "ADDRESS", "READ", "WRITE", "PERM"]
    assert row.split()[:2] == ["broker-a", "DefaultCluster"]
    assert row.split()[3:] == ["4", "4", "RW-"]

    as_json = json.loads(cometmq("topic", "route", "RoundTrip", "-n", namesrv_addr, "--json").stdout)
    assert [q["writeQueueNums"] for q in as_json["queueDatas"]] == [4]
    assert list(as_json["brokerDatas"][0]["brokerAddrs"]) == ["0"]

    deleted = cometmq("topic", "delete", "RoundTrip", "-n", namesrv_addr)
    assert deleted.returncode == 0, deleted.stderr
    assert "deleted topic RoundTrip" in deleted.stdout
    assert "RoundTrip" not in cometmq("topic", "list", "-n", namesrv_addr).stdout.split()
    gone = cometmq("topic", "route", "RoundTrip", "-n", namesrv_addr)
    assert_one_line_error(gone, "No topic route info in name server for the topic: RoundTrip", "code 17")


def test_deleting_a_topic_that_does_not_exist_says_so_and_fails(namesrv_addr: str) -> None:
    assert_one_line_error(
        cometmq("topic", "delete", "NeverCreated", "-n", namesrv_addr),
        "topic NeverCreated does not exist in cluster DefaultCluster: nothing was deleted",
    )
    created = cometmq("topic", "create", "DeletedTwice", "-n", namesrv_addr)
    assert created.returncode == 0, created.stderr
    first = cometmq("topic", "delete", "DeletedTwice", "-n", namesrv_addr)
    assert first.returncode == 0 and "deleted topic DeletedTwice" in first.stdout, first.stderr
    assert_one_line_error(
        cometmq("topic", "delete", "DeletedTwice", "-n", namesrv_addr),
        "topic DeletedTwice does not exist in cluster DefaultCluster",
    )


def test_topic_list_json(namesrv_addr: str) -> None:
    created = cometmq("topic", "create", "Listed", "-n", namesrv_addr)
    assert created.returncode == 0, created.stderr
    topics = json.loads(cometmq("topic", "list", "-n", namesrv_addr, "--json").stdout)
    assert "Listed" in topics and "TBW102" not in topics
    kinds = {
        t["topic"]: t["kind"]
        for t in json.loads(cometmq("topic", "list", "--system", "-n", namesrv_addr, "--json").stdout)
    }
    assert kinds["Listed"] == "user" and kinds["TBW102"] == "system"


def test_cluster_list_shows_the_broker(namesrv_addr: str) -> None:
    result = cometmq("cluster", "list", "-n", namesrv_addr)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.strip().splitlines()
    assert header.split()[:10] == [
        "CLUSTER",
        "BROKER",
        "ID",
        "ADDRESS",
        "ROLE",
        "EPOCH",
        "IN_SYNC",
        "LAG_BYTES",
        "LAG_S",
        "VERSION",
    ]
    [row] = rows
    assert row.split()[:3] == ["DefaultCluster", "broker-a", "0"]
    # A static master's first epoch; no in-sync set without etcd; a master has no lag.
    assert row.split()[4:9] == ["ASYNC_MASTER", "1", "-", "-", "-"]
    assert row.split()[3].startswith("127.0.0.1:")

    [entry] = json.loads(cometmq("cluster", "list", "-n", namesrv_addr, "--json").stdout)
    assert (entry["cluster"], entry["brokerName"], entry["brokerId"]) == ("DefaultCluster", "broker-a", 0)
    assert entry["role"] == "ASYNC_MASTER"
    version = entry["runtime"]["brokerVersionDesc"]  # from the broker itself (GET_BROKER_RUNTIME_INFO)
    assert version in row


def test_cluster_list_shows_the_message_rates_while_messages_come_and_go(
    standalone: tuple[ServerProcess, str],
) -> None:
    server, namesrv = standalone
    addr = broker_address(server)
    created = cometmq("topic", "create", "Traffic", "--queues", "1", "-n", namesrv)
    assert created.returncode == 0, created.stderr

    def rates_shown() -> dict[str, str] | None:
        send(addr, "Traffic", b"tick")  # traffic in the 10 s window the table shows, however slow
        invoke(addr, pull_request("Traffic", 0, 0, group="GID_traffic"))
        header, row = cometmq("cluster", "list", "-n", namesrv).stdout.rstrip("\n").splitlines()
        starts = {name: header.index(name) for name in ("IN_TPS", "OUT_TPS", "IN_TODAY")}
        shown = {
            "in": row[starts["IN_TPS"] : starts["OUT_TPS"]].strip(),
            "out": row[starts["OUT_TPS"] : starts["IN_TODAY"]].strip(),
        }
        return shown if all(value != "-" and float(value) > 0 for value in shown.values()) else None

    wait_until_blocking(rates_shown, message="IN_TPS and OUT_TPS above 0")


def test_namesrv_from_environment(namesrv_addr: str) -> None:
    result = cometmq("topic", "list", "--system", env={"COMETMQ_NAMESRV": namesrv_addr})
    assert result.returncode == 0, result.stderr
    assert "TBW102" in result.stdout.split()


def test_topic_attributes_are_set_by_create_and_changed_by_update(namesrv_addr: str) -> None:
    created = cometmq(
        "topic",
        "create",
        "Attributed",
        "--queues",
        "3",
        "--attributes",
        "+deduplication=true",
        "-n",
        namesrv_addr,
    )
    assert created.returncode == 0, created.stderr
    removed = cometmq("topic", "update", "Attributed", "--attributes=-deduplication", "-n", namesrv_addr)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.startswith("updated topic Attributed on broker-a"), removed.stdout
    # An update that names no queue count keeps the topic's.
    route = cometmq("topic", "route", "Attributed", "--json", "-n", namesrv_addr)
    assert route.returncode == 0, route.stderr
    assert [q["writeQueueNums"] for q in json.loads(route.stdout)["queueDatas"]] == [3]
    # Gone already: the broker says so.
    assert_one_line_error(
        cometmq("topic", "update", "Attributed", "--attributes=-deduplication", "-n", namesrv_addr),
        "attribute deduplication cannot be removed: the topic does not carry it",
    )
    assert_one_line_error(
        cometmq("topic", "create", "Attributed", "-a", "+dedup=true", "-n", namesrv_addr),
        "unknown topic attribute 'dedup'",
    )


def test_a_batchcq_topic_shows_its_queue_type_in_list_and_route(namesrv_addr: str) -> None:
    created = cometmq(
        "topic",
        "create",
        "ListedBatchCQ",
        "--queues",
        "2",
        "--attributes",
        "+queue.type=BatchCQ",
        "-n",
        namesrv_addr,
    )
    assert created.returncode == 0, created.stderr
    lines = cometmq("topic", "list", "-n", namesrv_addr).stdout.splitlines()
    assert "ListedBatchCQ  +queue.type=BatchCQ" in lines
    route = cometmq("topic", "route", "ListedBatchCQ", "-n", namesrv_addr).stdout
    assert route.strip().splitlines()[-1] == "attributes: +queue.type=BatchCQ"
    as_json = json.loads(cometmq("topic", "route", "ListedBatchCQ", "--json", "-n", namesrv_addr).stdout)
    assert as_json["attributes"] == {"queue.type": "BatchCQ"}
    assert_one_line_error(
        cometmq("topic", "update", "ListedBatchCQ", "-a", "+queue.type=SimpleCQ", "-n", namesrv_addr),
        "attempt to update an unchangeable attribute queue.type",
    )


def test_a_topic_message_type_round_trips_through_create_update_list_and_route(namesrv_addr: str) -> None:
    created = cometmq("topic", "create", "Typed", "--attributes", "+message.type=FIFO", "-n", namesrv_addr)
    assert created.returncode == 0, created.stderr
    assert "Typed  +message.type=FIFO" in cometmq("topic", "list", "-n", namesrv_addr).stdout.splitlines()
    updated = cometmq("topic", "update", "Typed", "-a", "+message.type=DELAY", "-n", namesrv_addr)
    assert updated.returncode == 0, updated.stderr
    route = cometmq("topic", "route", "Typed", "-n", namesrv_addr).stdout
    assert route.strip().splitlines()[-1] == "attributes: +message.type=DELAY"
    as_json = json.loads(cometmq("topic", "route", "Typed", "--json", "-n", namesrv_addr).stdout)
    assert as_json["attributes"] == {"message.type": "DELAY"}
    # RocketMQ's broker refuses MIXED unless enableMixedMessageType, which is off by default.
    assert_one_line_error(
        cometmq("topic", "update", "Typed", "-a", "+message.type=MIXED", "-n", namesrv_addr),
        "MIXED message type is not supported.",
    )
    assert_one_line_error(
        cometmq("topic", "update", "Typed", "-a", "+message.type=fifo", "-n", namesrv_addr),
        "topic attribute message.type takes DELAY or FIFO or MIXED or NORMAL or TRANSACTION or "
        "UNSPECIFIED, not 'fifo'",
    )


def test_illegal_topic_name(namesrv_addr: str) -> None:
    result = cometmq("topic", "create", "x y", "-n", namesrv_addr)
    assert_one_line_error(result)
    assert result.stderr.strip() == (
        'cometmq: error: topic "x y" is illegal: The specified topic contains illegal characters, '
        "allowing only ^[%|a-zA-Z0-9_-]+$"
    )


def test_unknown_cluster(namesrv_addr: str) -> None:
    assert_one_line_error(
        cometmq("topic", "create", "T", "--cluster", "Nope", "-n", namesrv_addr), "cluster 'Nope' is unknown"
    )


# Commands that start by asking the name server.
NAMESRV_COMMANDS = [
    ["topic", "list"],
    ["cluster", "list"],
    ["topic", "create", "T"],
    ["topic", "route", "T"],
    ["topic", "status", "T"],
    ["group", "list"],
    ["group", "progress", "G"],
    ["message", "get", "ID"],
    ["message", "send", "-t", "T", "body"],
    ["message", "consume", "-t", "T"],
    ["message", "consume", "-t", "T", "-g", "G"],
    ["dlq", "list", "G"],
    ["bench", "produce", "--count", "10"],
    ["bench", "consume", "--count", "10"],
]


@pytest.mark.parametrize("args", NAMESRV_COMMANDS)
def test_no_server_reachable(args: list[str]) -> None:
    port = free_port()
    result = cometmq(*args, "--namesrv", f"127.0.0.1:{port}")
    assert_one_line_error(result, f"cannot connect to 127.0.0.1:{port}")


@pytest.mark.parametrize("args", NAMESRV_COMMANDS)
def test_a_broker_address_given_as_the_name_server_is_named_as_a_broker(
    standalone: tuple[ServerProcess, str], args: list[str]
) -> None:
    broker = broker_address(standalone[0])
    result = cometmq(*args, "--namesrv", broker)
    assert_one_line_error(
        result, f"{broker} is a broker, not a name server: it does not serve name-server request"
    )


def test_port_in_use_names_the_port_and_the_flag(namesrv_addr: str, tmp_path: Path) -> None:
    port = namesrv_addr.rsplit(":", 1)[1]
    result = cometmq("standalone", "--data-dir", str(tmp_path / "d"), "--namesrv-port", port, timeout=30)
    assert_one_line_error(result, f"127.0.0.1:{port} is already in use", "--namesrv-port")
    # A port whose next one (the broker's HA port) is free: the one in use is the one reported.
    with socket.create_server(("127.0.0.1", free_port())) as taken:
        broker_port = str(taken.getsockname()[1])
        result = cometmq(
            "standalone",
            "--data-dir",
            str(tmp_path / "d"),
            "--namesrv-port",
            str(free_port()),
            "--broker-port",
            broker_port,
            "--log-level",
            "WARNING",  # the NameServer has started by then and says so at INFO
            timeout=30,
        )
        assert_one_line_error(result, f"127.0.0.1:{broker_port} is already in use", "--broker-port")
        namesrv = cometmq("namesrv", "--host", "127.0.0.1", "--port", broker_port, timeout=30)
        assert_one_line_error(namesrv, f"127.0.0.1:{broker_port} is already in use", "--port")
        broker = cometmq(
            "broker",
            "-n",
            namesrv_addr,
            "--host",
            "127.0.0.1",
            "--port",
            broker_port,
            "--data-dir",
            str(tmp_path / "b"),
            "--log-level",
            "WARNING",
            timeout=30,
        )
        assert_one_line_error(broker, f"127.0.0.1:{broker_port} is already in use", "--port")


def test_bad_config_file(tmp_path: Path) -> None:
    missing = cometmq("standalone", "-c", str(tmp_path / "nope.conf"), "--data-dir", str(tmp_path / "d"))
    assert_one_line_error(missing, "cannot read", "nope.conf")
    bad = tmp_path / "bad.conf"
    bad.write_text("listenPort=not-a-port\n")
    result = cometmq("standalone", "-c", str(bad), "--data-dir", str(tmp_path / "d"))
    assert_one_line_error(result, "listenPort")
    broker = cometmq("broker", "-c", str(bad), "-n", "127.0.0.1:1", "--data-dir", str(tmp_path / "d"))
    assert_one_line_error(broker, "listenPort")


def test_broker_needs_a_namesrv(tmp_path: Path) -> None:
    assert_one_line_error(cometmq("broker", "--data-dir", str(tmp_path / "d")), "NameServer address")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], "standalone"),
        (["standalone"], "one process"),
        (["namesrv"], "NameServer"),
        (["broker"], "--namesrv-addr"),
        (["topic"], "create"),
        (["topic", "create"], "--queues"),
        (["topic", "list"], "--json"),
        (["topic", "route"], "route"),
        (["topic", "status"], "MIN_OFFSET"),
        (["message", "send"], "one message per line of standard input"),
        (["message", "consume"], "--follow it waits for new messages until Ctrl-C"),
        (["topic", "delete"], "--cluster"),
        (["cluster", "list"], "broker"),
        ([], "dlq"),
        (["group"], "reset"),
        (["group", "create"], "--retry-max-times"),
        (["dlq"], "resend"),
        (["dlq", "resend"], "RESENT_FROM_DLQ"),
        (["bench"], "latency"),
        (["bench", "produce"], "--inflight"),
        (["pipeline", "demo"], "Java 17"),
    ],
)
def test_help(args: list[str], words: str) -> None:
    result = cometmq(*args, "--help")
    assert result.returncode == 0
    assert words in " ".join(result.stdout.split())  # however the help is wrapped


def test_usage_errors_exit_2() -> None:
    assert cometmq().returncode == 2
    assert cometmq("topic").returncode == 2
    assert cometmq("topic", "create").returncode == 2


def test_version() -> None:
    result = cometmq("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("cometmq ")


def test_sigterm_stops_cleanly_and_data_survives(tmp_path: Path, broker_conf: Path) -> None:
    data_dir = tmp_path / "data"
    server, namesrv = start_standalone(data_dir, broker_conf)
    try:
        created = cometmq("topic", "create", "Durable", "--queues", "2", "-n", namesrv)
        assert created.returncode == 0, created.stderr
    finally:
        status = server.terminate()
    assert status == 0, server.log()
    assert "Traceback" not in server.log()

    server, namesrv = start_standalone(data_dir, broker_conf)
    try:
        route = cometmq("topic", "route", "Durable", "-n", namesrv, "--json")
        assert route.returncode == 0, route.stderr + server.log()
        assert [q["writeQueueNums"] for q in json.loads(route.stdout)["queueDatas"]] == [2]
    finally:
        assert server.terminate() == 0


def test_ctrl_c_stops_namesrv_cleanly(tmp_path: Path) -> None:
    server = ServerProcess(
        ["namesrv", "--host", "127.0.0.1", "--port", str(free_port())], tmp_path / "ns.log"
    )
    try:
        server.wait_ready("CometMQ namesrv ready:")
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(30) == 0
    finally:
        server.terminate()
    assert "Traceback" not in server.log()


def test_namesrv_with_two_brokers(tmp_path: Path, broker_conf: Path) -> None:
    namesrv_port = free_port()
    namesrv = f"127.0.0.1:{namesrv_port}"
    servers = [
        ServerProcess(["namesrv", "--host", "127.0.0.1", "--port", str(namesrv_port)], tmp_path / "ns.log")
    ]
    try:
        assert (
            servers[0].wait_ready("CometMQ namesrv ready:")
            == f"CometMQ namesrv ready: listening on {namesrv}"
        )
        for name in ("broker-a", "broker-b"):
            broker = ServerProcess(
                [
                    "broker",
                    "--namesrv-addr",
                    namesrv,
                    "-c",
                    str(broker_conf),
                    "--data-dir",
                    str(tmp_path / name),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(free_port()),
                    "--broker-name",
                    name,
                ],
                tmp_path / f"{name}.log",
            )
            servers.append(broker)
            assert broker.wait_ready("CometMQ broker ready:").startswith(
                f"CometMQ broker ready: {name} at 127.0.0.1:"
            )

        listing = cometmq("cluster", "list", "-n", namesrv)
        assert listing.returncode == 0, listing.stderr
        rows = [line.split()[:3] for line in listing.stdout.strip().splitlines()[1:]]
        assert rows == [["DefaultCluster", "broker-a", "0"], ["DefaultCluster", "broker-b", "0"]]

        created = cometmq("topic", "create", "Spread", "--queues", "3", "-n", namesrv)
        assert created.returncode == 0, created.stderr
        route = json.loads(cometmq("topic", "route", "Spread", "-n", namesrv, "--json").stdout)
        assert sorted(q["brokerName"] for q in route["queueDatas"]) == ["broker-a", "broker-b"]
        assert sorted(b["brokerName"] for b in route["brokerDatas"]) == ["broker-a", "broker-b"]

        # A broker that stops unregisters; its queues leave the route.
        assert servers.pop().terminate() == 0

        def routed_brokers() -> list[str]:
            route = json.loads(cometmq("topic", "route", "Spread", "-n", namesrv, "--json").stdout)
            return [q["brokerName"] for q in route["queueDatas"]]

        wait_until_blocking(lambda: routed_brokers() == ["broker-a"], message="broker-b gone from the route")
    finally:
        for server in reversed(servers):
            server.terminate()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["group", "create", "GID_x", "--retry-queues", "-1"],
            "cometmq group create: error: argument --retry-queues: '-1' is not a whole number of at least 0",
        ),
        (
            ["group", "update", "GID_x", "--retry-max-times", "x"],
            "cometmq group update: error: argument --retry-max-times: 'x' is not a whole number",
        ),
        (
            ["dlq", "list", "GID_x", "--max", "0"],
            "cometmq dlq list: error: argument --max: '0' is not a whole",
        ),
        (
            ["message", "query", "--topic", "T", "--key", "k", "--max", "0"],
            "cometmq message query: error: argument --max: '0' is not a whole number of at least 1",
        ),
        (
            ["topic", "create", "T", "--queues", "0"],
            "cometmq topic create: error: argument --queues: '0' is not a whole number of at least 1",
        ),
        (
            ["pipeline", "demo", "--events", "0"],
            "cometmq pipeline demo: error: argument --events: '0' is not a whole number of at least 1",
        ),
    ],
)
def test_counts_out_of_range_are_usage_errors_before_anything_is_asked(args: list[str], error: str) -> None:
    result = cometmq(*args, "-n", "127.0.0.1:1")  # never connected to
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(error)
