"""``cometmq broker config get|set``, ``cometmq producer connections``, ``cometmq group clone-offsets``
and ``cometmq stats`` against a real ``cometmq standalone`` process."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.remoting import RemotingClient
from processes import ServerProcess, broker_address, cometmq

from .cli_support import commit, create_topic, error_line, invoke, pull_request, send


@pytest.fixture(scope="module")
def cluster(standalone: tuple[ServerProcess, str]) -> dict[str, str]:
    server, namesrv = standalone
    return {"namesrv": namesrv, "addr": broker_address(server)}


def test_config_get_prints_broker_conf_lines_and_set_changes_one(cluster: dict[str, str]) -> None:
    namesrv, addr = cluster["namesrv"], cluster["addr"]
    shown = cometmq("broker", "config", "get", "-n", namesrv)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "enablePropertyFilter=true" in lines  # standalone turns SQL92 filters on
    assert any(line.startswith("brokerName=") for line in lines)

    changed = cometmq(
        "broker", "config", "set", "shortPollingTimeMills", "300", "--broker-addr", addr, "-n", namesrv
    )
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout.strip() == f"shortPollingTimeMills=300 on {addr}"
    one = cometmq("broker", "config", "get", "--key", "shortPollingTimeMills", "--json", "-n", namesrv)
    assert json.loads(one.stdout) == {addr: {"shortPollingTimeMills": "300"}}


def test_config_set_of_a_key_fixed_at_start_is_a_one_line_error_naming_it(cluster: dict[str, str]) -> None:
    namesrv = cluster["namesrv"]
    line = error_line(cometmq("broker", "config", "set", "storePathRootDir", "/tmp/x", "-n", namesrv))
    assert line.startswith("cannot change storePathRootDir while the broker runs")
    assert "longPollingEnable" in line and line.endswith("(response code 16)")
    still = cometmq("broker", "config", "get", "--key", "storePathRootDir", "-n", namesrv).stdout
    assert still.strip() != "storePathRootDir=/tmp/x"
    bad = error_line(cometmq("broker", "config", "set", "transactionCheckMax", "many", "-n", namesrv))
    assert "transactionCheckMax" in bad


def test_producer_connections_shows_a_group_s_producers(cluster: dict[str, str]) -> None:
    namesrv, addr = cluster["namesrv"], cluster["addr"]
    create_topic(namesrv, "OpsSent")

    async def go() -> subprocess.CompletedProcess[str]:
        producer = RemotingClient()
        try:
            body = {"clientID": "10.1.2.3@cli", "producerDataSet": [{"groupName": "PID_ops"}]}
            beat = RemotingCommand(
                code=RequestCode.HEART_BEAT, body=json.dumps(body).encode(), language="JAVA"
            )
            assert (await producer.invoke(addr, beat)).code == 0
            args = ["producer", "connections", "PID_ops", "--topic", "OpsSent", "-n", namesrv]
            return await asyncio.to_thread(cometmq, *args)
        finally:
            await producer.close()

    result = asyncio.run(go())
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.strip().splitlines()
    assert header.split() == ["CLIENT_ID", "ADDRESS", "LANGUAGE", "VERSION", "BROKERS"]
    assert row.split()[0] == "10.1.2.3@cli" and row.split()[2] == "JAVA"
    gone = error_line(cometmq("producer", "connections", "PID_ops", "--topic", "OpsSent", "-n", namesrv))
    assert gone == "the producer group[PID_ops] not exist (response code 1)"


def test_clone_offsets_gives_a_group_the_offsets_of_another(cluster: dict[str, str]) -> None:
    namesrv, addr = cluster["namesrv"], cluster["addr"]
    create_topic(namesrv, "OpsCloned")
    for i in range(5):
        send(addr, "OpsCloned", f"c{i}".encode())
    commit(addr, "GID_from", "OpsCloned", 0, 4)
    result = cometmq("group", "clone-offsets", "GID_from", "GID_to", "--topic", "OpsCloned", "-n", namesrv)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("group GID_to has the offsets of GID_from on OpsCloned on ")
    progress = json.loads(cometmq("group", "progress", "GID_to", "--json", "-n", namesrv).stdout)
    assert [(q["topic"], q["consumerOffset"], q["lag"]) for q in progress["queues"]] == [("OpsCloned", 4, 1)]


def test_clone_offsets_from_a_group_without_offsets_on_the_topic_fails(cluster: dict[str, str]) -> None:
    namesrv, addr = cluster["namesrv"], cluster["addr"]
    assert cometmq("topic", "create", "OpsNotCloned", "--queues", "1", "-n", namesrv).returncode == 0
    assert cometmq("topic", "create", "OpsElsewhere", "--queues", "1", "-n", namesrv).returncode == 0
    send(addr, "OpsElsewhere", b"x")
    commit(addr, "GID_elsewhere", "OpsElsewhere", 0, 1)
    for source in ("GID_nope", "GID_elsewhere"):
        result = cometmq(
            "group", "clone-offsets", source, "GID_new", "--topic", "OpsNotCloned", "-n", namesrv
        )
        assert error_line(result) == f"group {source} has no offsets on OpsNotCloned: nothing to copy"


def test_stats_shows_rates_and_today_s_counts_per_topic_and_group(cluster: dict[str, str]) -> None:
    namesrv, addr = cluster["namesrv"], cluster["addr"]
    create_topic(namesrv, "OpsCounted")
    for i in range(3):
        send(addr, "OpsCounted", f"s{i}".encode())
    pulled = invoke(addr, pull_request("OpsCounted", 0, 0, group="GID_counted"))
    assert pulled.code == 0
    commit(addr, "GID_counted", "OpsCounted", 0, 2)

    result = cometmq("stats", "--topic", "OpsCounted", "-n", namesrv)
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.strip().splitlines()
    assert header.split() == ["TOPIC", "GROUP", "LAG", "IN_TPS", "OUT_TPS", "IN_DAY", "OUT_DAY"]
    cells = row.split()
    assert cells[:3] == ["OpsCounted", "GID_counted", "1"] and cells[5:] == ["3", "3"]
    assert float(cells[3]) > 0 and float(cells[4]) > 0

    [topic] = json.loads(cometmq("stats", "--topic", "OpsCounted", "--json", "-n", namesrv).stdout)
    assert (topic["inToday"], topic["groups"][0]["outToday"], topic["groups"][0]["lag"]) == (3, 3, 1)
    everything = cometmq("stats", "--active", "-n", namesrv)
    assert "OpsCounted" in everything.stdout and "RMQ_SYS" not in everything.stdout


def test_broker_consume_stats_prints_each_group_s_lag_and_the_total(cluster: dict[str, str]) -> None:
    namesrv, addr = cluster["namesrv"], cluster["addr"]
    create_topic(namesrv, "OpsBehind")
    for i in range(4):
        send(addr, "OpsBehind", f"b{i}".encode())
    commit(addr, "GID_behind", "OpsBehind", 0, 1)
    result = cometmq("broker", "consume-stats", addr, "--min-lag", "3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].split() == [
        "TOPIC", "GROUP", "BROKER", "QUEUE", "BROKER_OFFSET", "CONSUMER_OFFSET", "LAG", "LAST_CONSUME_TIME",
    ]  # fmt: skip
    assert [line.split()[:2] + line.split()[3:7] for line in lines[1:-1]] == [
        ["OpsBehind", "GID_behind", "0", "4", "1", "3"]
    ]
    assert lines[-1].startswith("total lag: ")
    as_json = json.loads(cometmq("broker", "consume-stats", addr, "--json").stdout)
    assert {"group": "GID_behind", "topic": "OpsBehind", "lag": 3}.items() <= next(
        q for q in as_json["queues"] if q["group"] == "GID_behind"
    ).items()
