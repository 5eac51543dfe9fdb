"""Consumer groups with the official C++ client (rocketmq==0.4.4): broadcasting, and orderly
consumption while a second instance joins the group."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from test_cpp_client import bodies, collect, cpp, spawn, wait_for_consumers

from processes import StandaloneServer, cometmq

pytestmark = pytest.mark.interop


def test_broadcasting_instances_each_receive_every_message(standalone: StandaloneServer) -> None:
    created = cometmq("topic", "create", "BroadcastTopic", "--queues", "4", "-n", standalone.namesrv)
    assert created.returncode == 0, created.stderr
    args = ("--group", "GID_cpp_broadcast", "--broadcast", "--expect", "40", "--timeout", "60",
            "--instance-name")  # fmt: skip
    first = spawn(standalone, "push-consume", "BroadcastTopic", *args, "one")
    second = spawn(standalone, "push-consume", "BroadcastTopic", *args, "two")
    try:
        wait_for_consumers(standalone, "GID_cpp_broadcast", first, second)
        cpp(standalone, "produce", "BroadcastTopic", "--count", "40", "--body-prefix", "all-")
        expected = sorted(f"all-{i}".encode() for i in range(40))
        assert sorted(bodies(collect(first)["messages"])) == expected
        assert sorted(bodies(collect(second)["messages"])) == expected
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()


def _offsets_by_queue(messages: list[dict[str, Any]]) -> dict[int, list[int]]:
    by_queue: dict[int, list[int]] = defaultdict(list)
    for message in messages:
        by_queue[message["queue_id"]].append(message["queue_offset"])
    return by_queue


def test_orderly_consumers_keep_queue_order_while_a_second_instance_joins(
    standalone: StandaloneServer,
) -> None:
    created = cometmq("topic", "create", "OrderlyJoin", "--queues", "4", "-n", standalone.namesrv)
    assert created.returncode == 0, created.stderr
    args = ("--group", "GID_cpp_orderly_join", "--orderly", "--allow-fewer", "--timeout", "40",
            "--threads", "2", "--instance-name")  # fmt: skip
    first = spawn(standalone, "push-consume", "OrderlyJoin", *args, "one")
    second = None
    try:
        wait_for_consumers(standalone, "GID_cpp_orderly_join", first)
        # Four sharding keys, one per queue; each key's messages in send order.
        for key in range(4):
            cpp(standalone, "produce", "OrderlyJoin", "--count", "15", "--mode", "orderly",
                "--sharding-key", str(key), "--body-prefix", f"k{key}-a-")  # fmt: skip
        second = spawn(standalone, "push-consume", "OrderlyJoin", *args, "two")
        wait_for_consumers(standalone, "GID_cpp_orderly_join", first, second)  # the queues split anew
        for key in range(4):
            cpp(standalone, "produce", "OrderlyJoin", "--count", "15", "--mode", "orderly",
                "--sharding-key", str(key), "--body-prefix", f"k{key}-b-")  # fmt: skip
        got_first = collect(first)["messages"]
        got_second = collect(second)["messages"]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    # Every message reached the group (a queue that changed hands may repeat what was not yet committed).
    everything = set(bodies(got_first)) | set(bodies(got_second))
    assert everything == {f"k{k}-{p}-{i}".encode() for k in range(4) for p in "ab" for i in range(15)}
    assert got_second, "the instance that joined took over some queues"
    # Each instance saw each of its queues in order: offsets only go up.
    for got in (got_first, got_second):
        for queue_id, offsets in _offsets_by_queue(got).items():
            assert offsets == sorted(offsets), f"queue {queue_id} out of order: {offsets}"
    # And within every queue the messages keep their send order.
    for got in (got_first, got_second):
        by_queue: dict[int, list[bytes]] = defaultdict(list)
        for message in got:
            by_queue[message["queue_id"]].append(bytes.fromhex(message["body_hex"]))
        for sequence in by_queue.values():
            ordered = sorted(set(sequence), key=sequence.index)
            key_part = [b.rsplit(b"-", 2) for b in ordered]
            assert key_part == sorted(key_part, key=lambda k: (k[1], int(k[2])))
