"""CometMQ's asyncio Producer → the official C++ PushConsumer (rocketmq==0.4.4), through `cometmq standalone`.

What the Python client writes (properties, UNIQ_KEY, zlib bodies, per-queue order) must read back
unchanged in a client we did not write.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import TYPE_CHECKING

import pytest
from test_cpp_client import bodies, cpp

from cometmq.client.admin import AdminClient
from cometmq.client.message import Message, SendResult, SendStatus
from cometmq.client.producer import Producer

if TYPE_CHECKING:
    from processes import StandaloneServer

pytestmark = pytest.mark.interop


def test_tags_keys_properties_and_compressed_bodies_reach_the_cpp_consumer(
    standalone: StandaloneServer,
) -> None:
    big = [(f"big-{i}|" + "abcdefghij" * 700).encode() for i in range(2)]  # 7 KB: sent compressed

    async def produce() -> list[SendResult]:
        async with Producer("PID_py2cpp", standalone.namesrv) as producer:
            results = []
            for i in range(10):
                message = Message(
                    "PyToCpp",
                    f"msg-{i}".encode(),
                    tags="TagA",
                    keys=f"key-{i}",
                    properties={"color": f"blue-{i}", "size": "small"},
                )
                results.append(await producer.send(message))
            for body in big:
                results.append(
                    await producer.send(Message("PyToCpp", body, tags="Big", properties={"size": "big"}))
                )
            return results

    sent = asyncio.run(produce())
    assert all(r.status is SendStatus.SEND_OK for r in sent)
    got = cpp(
        standalone,
        "push-consume",
        "PyToCpp",
        "--group",
        "GID_py2cpp",
        "--expect",
        "12",
        "--prop-names",
        "color,size",
    )["messages"]
    assert sorted(bodies(got)) == sorted([f"msg-{i}".encode() for i in range(10)] + big)
    assert {m["id"] for m in got} == {r.msg_id for r in sent}  # C++ shows our UNIQ_KEY as the id
    for message in got:
        body = bytes.fromhex(message["body_hex"])
        assert message["topic"] == "PyToCpp"
        if body.startswith(b"big-"):
            assert message["tags"] == "Big" and message["properties"]["size"] == "big"
            continue
        index = int(body.decode().split("-")[1])
        assert message["tags"] == "TagA"
        assert message["keys"] == f"key-{index}"
        assert message["properties"] == {"color": f"blue-{index}", "size": "small"}


def test_sharding_key_order_holds_for_the_cpp_orderly_consumer(standalone: StandaloneServer) -> None:
    keys = ["alpha", "beta", "gamma", "delta"]

    async def produce() -> dict[str, set[int]]:
        async with AdminClient(standalone.namesrv) as admin:
            await admin.create_topic("PyToCppOrder", queues=4)
        queue_ids: dict[str, set[int]] = defaultdict(set)
        async with Producer("PID_py2cpp_order", standalone.namesrv) as producer:
            for seq in range(10):
                for key in keys:
                    result = await producer.send(
                        Message("PyToCppOrder", f"{key}:{seq}".encode()), sharding_key=key
                    )
                    queue_ids[key].add(result.queue.queue_id)
        return queue_ids

    queue_ids = asyncio.run(produce())
    assert all(len(ids) == 1 for ids in queue_ids.values())
    got = cpp(
        standalone,
        "push-consume",
        "PyToCppOrder",
        "--group",
        "GID_py2cpp_order",
        "--orderly",
        "--expect",
        "40",
    )["messages"]
    received: dict[str, list[int]] = defaultdict(list)
    for message in got:  # in the order the consumer's callbacks ran
        key, seq = bytes.fromhex(message["body_hex"]).decode().split(":")
        assert {message["queue_id"]} == queue_ids[key]
        received[key].append(int(seq))
    assert received == {key: list(range(10)) for key in keys}
