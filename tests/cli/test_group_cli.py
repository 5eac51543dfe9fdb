"""``cometmq group create|update|list|delete|progress|reset|consumers`` against a real
``cometmq standalone`` process."""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess

import pytest

from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.remoting import Connection, RemotingClient
from processes import COMMAND, ServerProcess, broker_address, cometmq, subprocess_env
from waiting import next_millisecond, wait_until

from .cli_support import commit, create_topic, error_line, send


def group(namesrv: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cometmq("group", *args, "-n", namesrv)


CONSUMER_ID = "7-127.0.0.1@cli"


def while_a_consumer_is_online(
    addr: str, group_name: str, topic: str, args: list[str]
) -> tuple[subprocess.CompletedProcess[str], list[RemotingCommand]]:
    """Run ``cometmq args`` while a C++-style consumer of ``group_name`` on ``topic`` heartbeats to
    the broker at ``addr``; the command's result and the RESET_CONSUMER_CLIENT_OFFSET requests that
    consumer got."""

    async def go() -> tuple[subprocess.CompletedProcess[str], list[RemotingCommand]]:
        told: list[RemotingCommand] = []

        def on_request(conn: Connection, request: RemotingCommand) -> None:
            if request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
                told.append(request)

        consumer = RemotingClient(on_request)
        body = {
            "clientID": CONSUMER_ID,
            "consumerDataSet": [
                {
                    "consumeFromWhere": 0,
                    "consumeType": 1,
                    "groupName": group_name,
                    "messageModel": 1,
                    "subscriptionDataSet": [{"subString": "*", "subVersion": "1", "topic": topic}],
                }
            ],
        }
        beat = RemotingCommand(code=RequestCode.HEART_BEAT, body=json.dumps(body).encode(), language="CPP")
        assert (await consumer.invoke(addr, beat)).code == 0
        proc = await asyncio.create_subprocess_exec(
            *COMMAND,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=subprocess_env(),
        )
        out, err = await proc.communicate()
        if b"told 1 online consumer" in out:  # a reset: the broker's notice is on its way
            await wait_until(lambda: told, message="the consumer told of the reset")
        await consumer.close()
        assert proc.returncode is not None
        return subprocess.CompletedProcess(args, proc.returncode, out.decode(), err.decode()), told

    return asyncio.run(go())


@pytest.fixture(scope="module")
def cluster(standalone: tuple[ServerProcess, str]) -> dict[str, str]:
    server, namesrv = standalone
    return {"namesrv": namesrv, "addr": broker_address(server)}


def test_create_list_update_delete(cluster: dict[str, str]) -> None:
    namesrv = cluster["namesrv"]
    created = group(namesrv, "create", "GID_admin", "--retry-max-times", "3", "--no-broadcast")
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("created group GID_admin on ")
    assert "retry max times 3, retry queues 1, broadcast refused, consume enabled, fifo no" in created.stdout

    listed = group(namesrv, "list")
    header, *rows = listed.stdout.strip().splitlines()
    assert header.split() == [
        "GROUP", "BROKER", "CONSUME", "FIFO", "BROADCAST_READS", "RETRY_QUEUES", "RETRY_MAX"
    ]  # fmt: skip
    [row] = [r.split() for r in rows if r.startswith("GID_admin ")]
    assert row[2:] == ["yes", "no", "refused", "1", "3"]

    assert error_line(group(namesrv, "create", "GID_admin")) == (
        "group GID_admin exists already (on " + row[1] + "); update changes its settings"
    )
    updated = group(namesrv, "update", "GID_admin", "--retry-max-times", "5", "--no-consume-enable")
    assert updated.returncode == 0, updated.stderr
    assert "retry max times 5, retry queues 1, broadcast refused, consume disabled, fifo no" in updated.stdout
    [config] = [
        c for c in json.loads(group(namesrv, "list", "--json").stdout) if c["groupName"] == "GID_admin"
    ]
    assert (config["retryMaxTimes"], config["consumeEnable"], config["consumeBroadcastEnable"]) == (
        5,
        False,
        False,
    )

    assert error_line(group(namesrv, "update", "GID_admin")) == (
        "nothing to change: give --retry-max-times, --retry-queues, --[no-]broadcast, "
        "--[no-]consume-enable or --[no-]fifo"
    )
    assert error_line(group(namesrv, "update", "GID_none", "--broadcast")) == (
        "group GID_none does not exist (create makes it)"
    )
    assert error_line(group(namesrv, "create", "bad name")) == (
        'group "bad name" is illegal: The specified name contains illegal characters, '
        "allowing only ^[%|a-zA-Z0-9_-]+$"
    )
    # Group names may be longer than topic names (255 characters, as RocketMQ allows).
    long_name = "G" * 255
    assert group(namesrv, "create", long_name).returncode == 0
    assert error_line(group(namesrv, "create", long_name + "G")) == (
        f'group "{long_name}G" is illegal: The specified name is longer than 255 characters.'
    )

    deleted = group(namesrv, "delete", "GID_admin")
    assert deleted.returncode == 0 and deleted.stdout.startswith("deleted group GID_admin on ")
    assert "GID_admin " not in group(namesrv, "list").stdout
    assert error_line(group(namesrv, "delete", "GID_admin")) == "group GID_admin does not exist"


def test_progress_shows_offsets_lag_and_last_consume_time(cluster: dict[str, str]) -> None:
    namesrv, addr = cluster["namesrv"], cluster["addr"]
    create_topic(namesrv, "Prog", 2)
    for i in range(4):
        send(addr, "Prog", f"p{i}".encode(), queue_id=0)
    send(addr, "Prog", b"q", queue_id=1)
    commit(addr, "GID_prog", "Prog", 0, 1)
    commit(addr, "GID_prog", "Prog", 1, 1)

    result = group(namesrv, "progress", "GID_prog")
    assert result.returncode == 0, result.stderr
    header, first, second, total = result.stdout.strip().splitlines()
    assert header.split() == [
        "TOPIC", "BROKER", "QUEUE", "BROKER_OFFSET", "CONSUMER_OFFSET", "LAG", "LAST_CONSUME_TIME",
    ]  # fmt: skip
    assert first.split()[:1] + first.split()[2:6] == ["Prog", "0", "4", "1", "3"]
    assert second.split()[:1] + second.split()[2:6] == ["Prog", "1", "1", "1", "0"]
    assert first.split()[6] == datetime.date.today().isoformat()  # the date of a real store time
    assert total.startswith("total lag: 3 ")

    as_json = json.loads(group(namesrv, "progress", "GID_prog", "--json").stdout)
    assert as_json["totalLag"] == 3
    assert [(q["queueId"], q["lag"]) for q in as_json["queues"]] == [(0, 3), (1, 0)]
    assert all(q["lastTimestamp"] > 0 for q in as_json["queues"])

    nothing = group(namesrv, "progress", "GID_never")
    assert (nothing.returncode, nothing.stdout.strip()) == (0, "group GID_never has no consumer offsets")


def test_reset_moves_offsets_and_tells_online_consumers(cluster: dict[str, str]) -> None:
    namesrv, addr = cluster["namesrv"], cluster["addr"]
    create_topic(namesrv, "Rst")
    send(addr, "Rst", b"r0")
    send(addr, "Rst", b"r1")
    cut = next_millisecond()
    send(addr, "Rst", b"r2")
    commit(addr, "GID_rst", "Rst", 0, 3)
    iso_cut = datetime.datetime.fromtimestamp(cut / 1000).isoformat(timespec="milliseconds")

    args = ["group", "reset", "GID_rst", "--topic", "Rst", "--timestamp", iso_cut, "-n", namesrv]
    result, told = while_a_consumer_is_online(addr, "GID_rst", "Rst", args)
    assert result.returncode == 0, result.stderr
    header, row, summary = result.stdout.strip().splitlines()
    assert header.split() == ["BROKER", "QUEUE", "OLD_OFFSET", "NEW_OFFSET"]
    assert row.split()[1:] == ["0", "3", "→", "2"]  # replays r2, the first message after the cut
    assert summary == "reset 1 queue of topic Rst for group GID_rst; told 1 online consumer"
    [request] = told
    assert json.loads(request.body)["offsetTable"][0]["offset"] == 2  # the C++ (array) form

    [broker] = json.loads(cometmq("cluster", "list", "--json", "-n", namesrv).stdout)
    earliest = group(namesrv, "reset", "GID_rst", "--topic", "Rst", "--to", "earliest", "--json")
    assert json.loads(earliest.stdout) == {
        "consumersNotified": 0,
        "queues": [
            {"topic": "Rst", "brokerName": broker["brokerName"],
             "queueId": 0, "oldOffset": 2, "newOffset": 0},
        ],
    }  # fmt: skip
    latest = group(namesrv, "reset", "GID_rst", "--topic", "Rst", "--to", "latest")
    assert latest.stdout.splitlines()[1].split()[1:] == ["0", "0", "→", "3"]
    explicit = group(namesrv, "reset", "GID_rst", "--topic", "Rst", "--to", "1", "--queue", "0")
    assert explicit.stdout.splitlines()[1].split()[1:] == ["0", "3", "→", "1"]
    progress = json.loads(group(namesrv, "progress", "GID_rst", "--topic", "Rst", "--json").stdout)
    assert progress["queues"][0]["consumerOffset"] == 1


def test_reset_and_consumers_errors_are_one_line(cluster: dict[str, str]) -> None:
    namesrv = cluster["namesrv"]
    assert error_line(group(namesrv, "reset", "GID_rst", "--topic", "Rst", "--to", "5")) == (
        "--to OFFSET needs --queue N: an offset is a position in one queue"
    )
    assert error_line(group(namesrv, "reset", "GID_rst", "--topic", "Rst", "--to", "99", "--queue", "0")) == (
        "Target offset 99 not in consume queue range [0-3] (response code 1)"
    )
    assert error_line(group(namesrv, "reset", "GID_typo", "--topic", "Rst", "--to", "latest")) == (
        "Group GID_typo does not exist (response code 26)"
    )
    bad_target = group(namesrv, "reset", "GID_rst", "--topic", "Rst", "--to", "soon")
    assert bad_target.returncode == 2 and "is not earliest, latest or an offset" in bad_target.stderr
    bad_time = group(namesrv, "reset", "GID_rst", "--topic", "Rst", "--timestamp", "yesterday")
    assert bad_time.returncode == 2 and "neither epoch milliseconds nor an ISO-8601 time" in bad_time.stderr
    helped = cometmq("group", "reset", "--help")
    assert helped.returncode == 0 and "first message stored at or after TS" in helped.stdout


def test_consumers_of_a_group_with_nobody_online_is_an_answer_not_an_error(cluster: dict[str, str]) -> None:
    namesrv = cluster["namesrv"]
    table = group(namesrv, "consumers", "GID_nobody")
    assert (table.returncode, table.stderr) == (0, "")
    assert table.stdout == "the consumer group GID_nobody has no consumer online\n"
    as_json = group(namesrv, "consumers", "GID_nobody", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["connections"] == []


def test_consumers_lists_the_online_consumers_and_their_subscriptions(cluster: dict[str, str]) -> None:
    namesrv, addr = cluster["namesrv"], cluster["addr"]
    args = ["group", "consumers", "GID_con", "-n", namesrv]
    table, _ = while_a_consumer_is_online(addr, "GID_con", "ConTopic", args)
    assert table.returncode == 0, table.stderr
    header, row, summary = table.stdout.strip().splitlines()
    assert header.split() == ["CLIENT_ID", "ADDRESS", "LANGUAGE", "VERSION"]
    assert row.split()[0] == CONSUMER_ID and row.split()[2] == "CPP"
    assert summary.endswith("subscribed to ConTopic (*)")
    as_json, _ = while_a_consumer_is_online(addr, "GID_con", "ConTopic", [*args, "--json"])
    info = json.loads(as_json.stdout)
    assert info["group"] == "GID_con"
    assert info["subscriptions"] == {"ConTopic": "*"}
    [connection] = info["connections"]
    assert (connection["clientId"], connection["language"]) == (CONSUMER_ID, "CPP")
    assert connection["clientAddr"].startswith("127.0.0.1:")


def test_fifo_group_round_trip(cluster: dict[str, str]) -> None:
    namesrv = cluster["namesrv"]
    created = group(namesrv, "create", "GID_fifo", "--fifo")
    assert created.returncode == 0, created.stderr
    assert created.stdout.rstrip().endswith("fifo yes")

    def listed_config() -> dict[str, object]:
        [config] = [
            c for c in json.loads(group(namesrv, "list", "--json").stdout) if c["groupName"] == "GID_fifo"
        ]
        return config

    assert listed_config()["consumeMessageOrderly"] is True
    [row] = [r.split() for r in group(namesrv, "list").stdout.splitlines() if r.startswith("GID_fifo ")]
    assert row[3] == "yes"

    updated = group(namesrv, "update", "GID_fifo", "--no-fifo")
    assert updated.returncode == 0, updated.stderr
    assert updated.stdout.rstrip().endswith("fifo no")
    assert listed_config()["consumeMessageOrderly"] is False
