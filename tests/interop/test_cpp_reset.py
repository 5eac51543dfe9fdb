"""`cometmq group reset --timestamp` while the official C++ push consumer (rocketmq==0.4.4) consumes:
the broker sends it RESET_CONSUMER_CLIENT_OFFSET in the array form C++ reads, and the consumer
replays from exactly the first message stored at or after the timestamp."""

from __future__ import annotations

import datetime
import json

import pytest
from test_cpp_client import bodies, collect, cpp, spawn

from processes import StandaloneServer, cometmq
from waiting import next_millisecond, wait_until_blocking

pytestmark = pytest.mark.interop

GROUP = "GID_cpp_reset"
TOPIC = "ResetTopic"


def consumer_offset(server: StandaloneServer) -> int:
    result = cometmq("group", "progress", GROUP, "--topic", TOPIC, "--json", "-n", server.namesrv)
    if result.returncode != 0:
        return -1
    queues = json.loads(result.stdout)["queues"]
    return int(queues[0]["consumerOffset"]) if queues else -1


def test_reset_by_timestamp_replays_from_the_right_message(standalone: StandaloneServer) -> None:
    created = cometmq("topic", "create", TOPIC, "--queues", "1", "-n", standalone.namesrv)
    assert created.returncode == 0, created.stderr
    cpp(standalone, "produce", TOPIC, "--count", "5", "--body-prefix", "early-")
    cut = next_millisecond()
    cpp(standalone, "produce", TOPIC, "--count", "5", "--body-prefix", "late-")

    # 10 first deliveries, then the 5 replayed ones; --linger catches any delivery beyond those.
    consumer = spawn(standalone, "push-consume", TOPIC, "--group", GROUP, "--expect", "15",
                     "--timeout", "90", "--linger", "3", "--threads", "1")  # fmt: skip
    try:
        # Everything consumed and committed (the C++ client commits every 5 s).
        def committed() -> bool:
            assert consumer.poll() is None, "the C++ consumer ended early"
            return consumer_offset(standalone) == 10

        wait_until_blocking(committed, message="the C++ consumer's commit of offset 10", timeout=60)
        iso_cut = datetime.datetime.fromtimestamp(cut / 1000).isoformat(timespec="milliseconds")
        reset = cometmq(
            "group", "reset", GROUP, "--topic", TOPIC, "--timestamp", iso_cut, "-n", standalone.namesrv
        )
        assert reset.returncode == 0, reset.stderr
        _, row, summary = reset.stdout.strip().splitlines()
        assert row.split()[1:] == ["0", "10", "→", "5"]
        assert summary.endswith("told 1 online consumer")
        result = collect(consumer, timeout=120)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.communicate()

    messages = result["messages"]
    assert len(messages) == 15, bodies(messages)
    first, replayed = messages[:10], messages[10:]
    assert sorted(bodies(first)) == sorted(
        [f"early-{i}".encode() for i in range(5)] + [f"late-{i}".encode() for i in range(5)]
    )
    # The replay starts at late-0, the first message stored after the cut, and repeats nothing older.
    assert bodies(replayed) == [f"late-{i}".encode() for i in range(5)]
    assert [m["queue_offset"] for m in replayed] == [5, 6, 7, 8, 9]
    assert consumer_offset(standalone) == 10  # and its shutdown committed where the replay ended
