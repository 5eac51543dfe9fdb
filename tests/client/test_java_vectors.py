"""CometMQ's client algorithms against answers frozen from the real Java RocketMQ classes.

``java_vectors.json`` is a frozen oracle, not a fake. It was made by compiling apache/rocketmq's own
sources at mirror commit 8fc57f1468d182eea11c01e089c0250d647dc5f3 (common/.../consistenthash/*.java,
MessageQueue, Message, AllocateMessageQueueConsistentHash with its AbstractAllocateMessageQueueStrategy,
SelectMessageQueueByHash) with javac 17 and running them on java 17.0.15, driven by a small program in
/tmp that is not part of this repo (four one-line stubs stood in for the slf4j logger and the
commons-lang/collections ``isEmpty`` helpers). As RebalanceImpl does, the driver sorted mqAll and cidAll
before calling ``allocate``. Do not edit the file by hand: regenerate it from Java. The one edit made
by hand removed a repeated line: the driver printed the allocation of a client id listed twice once per
listing, the same both times, and a JSON object keeps only one of two equal keys (the loader below
refuses a repeated key, so such a line cannot hide a difference).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cometmq.client._rebalance import allocate_consistent_hash
from cometmq.client.message import MessageQueue
from cometmq.protocol.taghash import java_string_hash


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    repeated = {key for key in keys if keys.count(key) > 1}
    if repeated:
        raise ValueError(f"java_vectors.json repeats the keys {sorted(repeated)}")
    return dict(pairs)


VECTORS: dict[str, Any] = json.loads(
    Path(__file__).with_name("java_vectors.json").read_text("utf-8"), object_pairs_hook=_unique_keys
)


@pytest.mark.parametrize("case", VECTORS["consistent_hash"], ids=lambda case: case["name"])
def test_consistent_hash_gives_each_client_what_java_gives_it(case: dict[str, Any]) -> None:
    topic = case["topic"]
    queues = [MessageQueue(topic, b, i) for b in case["brokers"] for i in range(case["queues_per_broker"])]
    for client_id, share in case["allocation"].items():
        expected = [MessageQueue(topic, broker, i) for broker, ids in share.items() for i in ids]
        got = allocate_consistent_hash(queues, case["client_ids"], client_id, case["virtual_nodes"])
        assert got == expected, client_id


@pytest.mark.parametrize("row", VECTORS["select_by_hash"], ids=lambda row: ascii(row["key"])[:32])
def test_string_hash_is_java_string_hashcode(row: dict[str, Any]) -> None:
    assert java_string_hash(row["key"]) == row["java_hash"]


@pytest.mark.parametrize("row", VECTORS["select_by_hash"], ids=lambda row: ascii(row["key"])[:32])
def test_select_by_hash_picks_the_queue_java_picks(row: dict[str, Any]) -> None:
    from cometmq.client.producer import select_by_hash

    for count, index in row["index"].items():
        queues = [MessageQueue("TopicTest", "broker-a", i) for i in range(int(count))]
        assert select_by_hash(queues, row["key"]) == queues[index], count
