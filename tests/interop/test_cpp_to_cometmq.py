"""The official C++ Producer (rocketmq==0.4.4, in a subprocess) sends; CometMQ's PushConsumer receives.

Tags, keys, user properties, unique ids, zlib-compressed bodies (the C++ client compresses bodies
over 4 KiB) and orderly sends must all arrive intact, orderly ones in queue order.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pytest
from _cpp_scenarios import make_body
from test_cpp_client import cpp

from cometmq.client import ConsumeResult, Message, MessageQueue, Producer, PushConsumer
from cometmq.client.message import ReceivedMessage
from processes import StandaloneServer
from waiting import wait_until

pytestmark = pytest.mark.interop


def consume(
    server: StandaloneServer, group: str, topic: str, expect: int, **options: Any
) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []

    async def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        got.extend(messages)
        return ConsumeResult.SUCCESS

    async def scenario() -> None:
        consumer = PushConsumer(group, server.namesrv, consume_from="first", **options)
        consumer.subscribe(topic)
        consumer.listen(listener)
        await consumer.start()
        try:
            await wait_until(lambda: len(got) >= expect, timeout=60, message=f"{expect} messages")
        finally:
            await consumer.close()

    asyncio.run(scenario())
    return got


@pytest.fixture(autouse=True)
def _client_support_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "client"))


def test_tags_keys_properties_and_compressed_bodies_arrive_intact(standalone: StandaloneServer) -> None:
    props = ["--prop", "color=red-{i}", "--prop", "shape=square"]
    plain = cpp(standalone, "produce", "CppToCometTopic", "--count", "12", "--tags", "TagA,TagB",
                "--keys-prefix", "key-", *props)["sent"]  # fmt: skip
    big = cpp(standalone, "produce", "CppToCometTopic", "--count", "3", "--body-prefix", "big-",
              "--body-size", "6000", "--tags", "Big")["sent"]  # fmt: skip
    got = consume(standalone, "GID_cpp_to_comet", "CppToCometTopic", expect=15)
    by_id = {m.msg_id: m for m in got}
    assert len(got) == 15 and len(by_id) == 15  # each once, by the C++ client's unique ids

    for sent in plain:
        i = sent["index"]
        m = by_id[sent["msg_id"]]
        assert m.body == make_body("msg-", i, None)
        assert (m.tags, m.keys) == (["TagA", "TagB"][i % 2], [f"key-{i}"])
        assert (m.properties["color"], m.properties["shape"]) == (f"red-{i}", "square")
        assert m.topic == "CppToCometTopic" and m.reconsume_times == 0
    for sent in big:
        m = by_id[sent["msg_id"]]
        assert m.sys_flag & 0x1  # stored compressed by the C++ client, inflated by the consumer
        assert m.body == make_body("big-", sent["index"], 6000)
        assert m.tags == "Big"


# Keys whose text Java's String.hashCode would put on other queues than arg % n does (for 4 or 8
# queues), so the CometMQ side below shows its selector at work, not the default's.
KEYS = ("13", "22")


def test_orderly_sends_arrive_in_queue_order(standalone: StandaloneServer) -> None:
    sent = []
    for key in KEYS:
        sent += cpp(standalone, "produce", "CppOrderTopic", "--count", "25", "--mode", "orderly",
                    "--sharding-key", key, "--body-prefix", f"k{key}-")["sent"]  # fmt: skip
    queue_of = {s["msg_id"]: s["queue_id"] for s in sent}
    assert len(set(queue_of.values())) == 2
    got = consume(standalone, "GID_cpp_orderly", "CppOrderTopic", expect=50, orderly=True)
    per_queue: dict[int, list[bytes]] = defaultdict(list)
    for m in got:
        assert m.queue_id == queue_of[m.msg_id]
        per_queue[m.queue_id].append(m.body)
    assert sorted(per_queue.values()) == [[f"k{key}-{i}".encode() for i in range(25)] for key in KEYS]

    # The C++ client's send_orderly picks queue arg % len(queues); a CometMQ producer with the selector
    # docs/client.md gives for it puts the same key on the same queue.
    async def send_like_cpp() -> dict[str, int]:
        def like_cpp(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
            return queues[int(key) % len(queues)]

        async with Producer("PID_like_cpp", standalone.namesrv, queue_selector=like_cpp) as producer:
            return {
                key: (await producer.send(Message("CppOrderTopic", b"x"), sharding_key=key)).queue.queue_id
                for key in KEYS
            }

    cpp_queue_of_key = {key: sent[25 * n]["queue_id"] for n, key in enumerate(KEYS)}
    assert asyncio.run(send_like_cpp()) == cpp_queue_of_key
