"""The official RocketMQ C++ client (PyPI rocketmq==0.4.4) against a real `cometmq standalone`.

Each C++ client runs in its own process (`_cpp_scenarios.py`), so a crash of librocketmq.so can never
take the test run down; it prints one JSON line with what it sent or received.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from processes import cometmq, read_cpp_result
from waiting import wait_until_blocking

if TYPE_CHECKING:
    from processes import StandaloneServer

pytestmark = pytest.mark.interop

SCRIPT = Path(__file__).with_name("_cpp_scenarios.py")


def _command(server: StandaloneServer, scenario: str, topic: str, *args: str) -> list[str]:
    return [sys.executable, str(SCRIPT), scenario, "--namesrv", server.namesrv, "--topic", topic, *args]


def cpp(
    server: StandaloneServer, scenario: str, topic: str, *args: str, timeout: float = 120
) -> dict[str, Any]:
    proc = subprocess.run(
        _command(server, scenario, topic, *args), capture_output=True, text=True, timeout=timeout
    )
    result = read_cpp_result(proc.stdout, proc.returncode, proc.stderr)
    assert result["ok"], f"{scenario} failed: {result['errors']}\nstderr:\n{proc.stderr[-3000:]}"
    return result


def spawn(server: StandaloneServer, scenario: str, topic: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _command(server, scenario, topic, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def collect(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    result = read_cpp_result(out, proc.returncode, err)
    assert result["ok"], f"failed: {result['errors']}\nstderr:\n{err[-3000:]}"
    return result


def bodies(messages: list[dict[str, Any]]) -> list[bytes]:
    return [bytes.fromhex(m["body_hex"]) for m in messages]


def wait_for_consumers(server: StandaloneServer, group: str, *consumers: subprocess.Popen[str]) -> None:
    """Until the broker lists one online client of *group* per running C++ consumer in *consumers*: each
    has sent its heartbeat, so the broker has told the group's members of each other. The C++ client's
    rebalance that follows is not visible from outside; the scenarios tolerate redelivery around it."""

    def online() -> bool:
        for proc in consumers:
            assert proc.poll() is None, f"a C++ consumer ended early: {collect(proc)}"
        listed = cometmq("group", "consumers", group, "--json", "-n", server.namesrv)
        return listed.returncode == 0 and len(json.loads(listed.stdout)["connections"]) == len(consumers)

    wait_until_blocking(online, message=f"{len(consumers)} consumers of {group} online")


def test_send_sync_then_a_new_group_receives_everything_intact(standalone: StandaloneServer) -> None:
    sent = cpp(
        standalone,
        "produce",
        "SyncTopic",
        "--count",
        "30",
        "--mode",
        "sync",
        "--tags",
        "TagA",
        "--keys-prefix",
        "key-",
        "--prop",
        "color=blue-{i}",
    )["sent"]
    assert [s["status"] for s in sent] == ["OK"] * 30
    assert len({s["msg_id"] for s in sent}) == 30
    # A group that starts after the sends still gets them all (young queues are served from 0).
    got = cpp(
        standalone,
        "push-consume",
        "SyncTopic",
        "--group",
        "GID_sync",
        "--expect",
        "30",
        "--prop-names",
        "color",
    )["messages"]
    assert sorted(bodies(got)) == sorted(f"msg-{i}".encode() for i in range(30))
    for message in got:
        index = int(bytes.fromhex(message["body_hex"]).decode().split("-")[1])
        assert message["tags"] == "TagA"
        assert message["keys"] == f"key-{index}"
        assert message["properties"]["color"] == f"blue-{index}"
        assert message["topic"] == "SyncTopic"
    assert {m["id"] for m in got} == {s["msg_id"] for s in sent}


def test_send_oneway_and_compressed_bodies(standalone: StandaloneServer) -> None:
    cpp(standalone, "produce", "OnewayTopic", "--count", "10", "--mode", "oneway", "--linger", "1")
    cpp(
        standalone,
        "produce",
        "OnewayTopic",
        "--count",
        "3",
        "--mode",
        "sync",
        "--body-size",
        "6000",
        "--body-prefix",
        "big-",
    )
    got = cpp(standalone, "push-consume", "OnewayTopic", "--group", "GID_oneway", "--expect", "13")[
        "messages"
    ]
    received = bodies(got)
    assert sorted(b for b in received if b.startswith(b"msg-")) == sorted(
        f"msg-{i}".encode() for i in range(10)
    )
    big = [b for b in received if b.startswith(b"big-")]
    assert len(big) == 3 and all(len(b) == 6000 for b in big)


def test_send_batch_is_stored_as_separate_messages(standalone: StandaloneServer) -> None:
    sent = cpp(
        standalone,
        "produce",
        "BatchTopic",
        "--count",
        "12",
        "--mode",
        "batch",
        "--batch-size",
        "4",
        "--tags",
        "TagB",
    )["sent"]
    assert all(s["status"] == "OK" for s in sent)
    result = cpp(standalone, "pull-consume", "BatchTopic", "--group", "GID_batchpull")
    assert sorted(bodies(result["messages"])) == sorted(f"msg-{i}".encode() for i in range(12))
    assert all(m["tags"] == "TagB" for m in result["messages"])


def test_send_orderly_keeps_a_sharding_key_on_one_queue_in_order(standalone: StandaloneServer) -> None:
    sent = cpp(
        standalone, "produce", "OrderTopic", "--count", "20", "--mode", "orderly", "--sharding-key", "7"
    )["sent"]
    assert len({s["queue_id"] for s in sent}) == 1
    offsets = [s["offset"] for s in sent]
    assert offsets == sorted(offsets) and len(set(offsets)) == 20
    got = cpp(standalone, "pull-consume", "OrderTopic", "--group", "GID_orderpull")["messages"]
    per_queue: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for message in got:
        per_queue[message["queue_id"]].append((message["queue_offset"], bytes.fromhex(message["body_hex"])))
    (queue,) = per_queue.values()
    assert [body for _, body in sorted(queue)] == [f"msg-{i}".encode() for i in range(20)]


def test_tag_filtered_subscription_gets_exactly_its_messages(standalone: StandaloneServer) -> None:
    cpp(standalone, "produce", "TagTopic", "--count", "30", "--tags", "TagA,TagB,TagC")
    got = cpp(
        standalone,
        "push-consume",
        "TagTopic",
        "--group",
        "GID_tags",
        "--expression",
        "TagA || TagC",
        "--expect",
        "20",
        "--linger",
        "3",
    )["messages"]
    assert sorted(m["tags"] for m in got) == ["TagA"] * 10 + ["TagC"] * 10
    expected = sorted(f"msg-{i}".encode() for i in range(30) if i % 3 != 1)
    assert sorted(bodies(got)) == expected


def test_pull_consumer_reads_every_queue(standalone: StandaloneServer) -> None:
    cpp(standalone, "produce", "PullTopic", "--count", "40")
    result = cpp(standalone, "pull-consume", "PullTopic", "--group", "GID_pull")
    assert sorted(bodies(result["messages"])) == sorted(f"msg-{i}".encode() for i in range(40))
    assert sorted(result["queue_ids"]) == [0, 1, 2, 3]  # C++ auto-creates topics with 4 queues
    assert {m["queue_id"] for m in result["messages"]} == {0, 1, 2, 3}


def test_two_consumers_of_one_group_split_the_queues(standalone: StandaloneServer) -> None:
    cpp(standalone, "produce", "SplitTopic", "--count", "1")  # creates the topic (4 queues)
    args = ("--group", "GID_split", "--allow-fewer", "--timeout", "14", "--instance-name")
    first = spawn(standalone, "push-consume", "SplitTopic", *args, "one")
    second = spawn(standalone, "push-consume", "SplitTopic", *args, "two")
    wait_for_consumers(standalone, "GID_split", first, second)
    cpp(standalone, "produce", "SplitTopic", "--count", "40", "--body-prefix", "split-")
    got_first = [b for b in bodies(collect(first)["messages"]) if b.startswith(b"split-")]
    got_second = [b for b in bodies(collect(second)["messages"]) if b.startswith(b"split-")]
    assert got_first and got_second, "each consumer owns some queues"
    assert not set(got_first) & set(got_second)
    assert sorted(got_first + got_second) == sorted(f"split-{i}".encode() for i in range(40))


def test_restart_keeps_topics_messages_and_committed_offsets(standalone: StandaloneServer) -> None:
    cpp(standalone, "produce", "RestartTopic", "--count", "20", "--body-prefix", "before-")
    first = cpp(standalone, "push-consume", "RestartTopic", "--group", "GID_restart", "--expect", "20")
    assert len(first["messages"]) == 20  # the consumer commits its offsets when it shuts down
    assert standalone.stop() == 0  # SIGTERM: clean shutdown, exit status 0
    standalone.start()
    cpp(standalone, "produce", "RestartTopic", "--count", "10", "--body-prefix", "after-")
    resumed = cpp(
        standalone,
        "push-consume",
        "RestartTopic",
        "--group",
        "GID_restart",
        "--expect",
        "10",
        "--linger",
        "3",
    )["messages"]
    assert sorted(bodies(resumed)) == sorted(f"after-{i}".encode() for i in range(10))
    everything = cpp(standalone, "pull-consume", "RestartTopic", "--group", "GID_restart_all")["messages"]
    assert len(everything) == 30


def test_orderly_push_consumer_receives_each_queue_in_order(standalone: StandaloneServer) -> None:
    cpp(standalone, "produce", "OrderlyTopic", "--count", "30", "--mode", "orderly", "--sharding-key", "3")
    got = cpp(standalone, "push-consume", "OrderlyTopic", "--group", "GID_orderly", "--orderly",
              "--expect", "30")["messages"]  # fmt: skip
    assert [bytes.fromhex(m["body_hex"]) for m in got] == [f"msg-{i}".encode() for i in range(30)]


def test_delayed_messages_arrive_after_their_delay_level(standalone: StandaloneServer) -> None:
    sent = cpp(standalone, "produce", "DelayTopic", "--count", "3", "--delay-level", "1", "--tags", "Late",
               "--keys-prefix", "key-", "--prop", "color=green-{i}")["sent"]  # fmt: skip
    assert [s["status"] for s in sent] == ["OK"] * 3
    got = cpp(standalone, "push-consume", "DelayTopic", "--group", "GID_delay", "--expect", "3",
              "--prop-names", "color,REAL_TOPIC")["messages"]  # fmt: skip
    assert sorted(bodies(got)) == [b"msg-0", b"msg-1", b"msg-2"]
    assert {m["id"] for m in got} == {s["msg_id"] for s in sent}  # the UNIQ_KEY is kept
    for message in got:
        index = int(bytes.fromhex(message["body_hex"]).decode().split("-")[1])
        assert message["topic"] == "DelayTopic" and message["tags"] == "Late"
        assert message["keys"] == f"key-{index}"
        assert message["properties"] == {"color": f"green-{index}", "REAL_TOPIC": "DelayTopic"}
        assert message["delay_time_level"] == 0  # DELAY is not on the delivered copy
        # Level 1 is 1 s: stored in the real topic at least that long after the producer sent it.
        assert message["store_timestamp"] - message["born_timestamp"] >= 1000
