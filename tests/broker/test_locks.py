"""Queue locks for orderly consumers, over the wire and their 60 s expiry."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from _support import broker_and_client

from cometmq.broker._locks import LOCK_MAX_LIVE_S, QueueLockProcessor
from cometmq.protocol import RemotingCommand, RequestCode


def lock_request(code: int, client_id: str, queue_ids: list[int]) -> RemotingCommand:
    body = {
        "consumerGroup": "G",
        "clientId": client_id,
        "mqSet": [{"topic": "T", "brokerName": "broker-a", "queueId": q} for q in queue_ids],
    }
    return RemotingCommand(code=code, body=json.dumps(body).encode())


def test_a_queue_is_locked_by_one_client_until_it_unlocks(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path) as (_, addr, client):

            async def lock(client_id: str, queue_ids: list[int]) -> list[int]:
                response = await client.invoke(
                    addr, lock_request(RequestCode.LOCK_BATCH_MQ, client_id, queue_ids)
                )
                return sorted(q["queueId"] for q in json.loads(response.body)["lockOKMQSet"])

            assert await lock("c1", [0, 1]) == [0, 1]
            assert await lock("c2", [1, 2]) == [2]
            assert await lock("c1", [0, 1, 2]) == [0, 1]  # renewal of its own; 2 belongs to c2
            await client.invoke(addr, lock_request(RequestCode.UNLOCK_BATCH_MQ, "c1", [1]))
            assert await lock("c2", [1]) == [1]

    asyncio.run(scenario())


def test_a_lock_lapses_after_its_live_time() -> None:
    locks = QueueLockProcessor()
    queue = ("T", "broker-a", 0)
    assert locks.lock("G", "c1", [queue], now=100.0) == [queue]
    assert locks.lock("G", "c2", [queue], now=100.0 + LOCK_MAX_LIVE_S) == []
    assert locks.lock("G", "c2", [queue], now=100.1 + LOCK_MAX_LIVE_S) == [queue]
