"""Many small queues across a clean restart and a kill -9 of a real broker.

A restarted store finds each queue's end by binary search over its last file's units and maps a
queue's files only when the queue is first used. Queue files of 10 units make queues end at every
position of a file: empty, mid-file, on a file's last unit, and one past it (a file created ahead
and still empty).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from crash_support import CrashableServer, broker_conf, create_topic, read_queue, send

from cometmq.remoting import RemotingClient

pytestmark = pytest.mark.timeout(240)

TOPICS = 6
QUEUES = 8
UNITS_PER_FILE = 10


def topic(i: int) -> str:
    return f"ManyQueues{i}"


def first_count(t: int, q: int) -> int:
    """Messages sent to a queue before the first restart: 0 to 23, so every end position in a file
    of 10 units occurs, file boundaries included."""
    return (t * QUEUES + q) * 7 % 24


Counts = dict[tuple[int, int], int]


async def _send_round(server: CrashableServer, rounds: list[Counts]) -> None:
    """Send the last round's count of messages to each queue (four queues at a time); each answer
    gives the queue offset that follows the earlier rounds' messages."""
    *before, counts = rounds
    client = RemotingClient()
    keys = iter(sorted(counts))

    async def sender() -> None:
        for t, q in keys:
            base = sum(r[(t, q)] for r in before)
            for n in range(counts[(t, q)]):
                body = f"{len(before)}-{t}-{q}-{n}".encode()
                _, sent = await send(client, server.broker, topic(t), q, body, {})
                assert sent is not None and (sent.queue_id, sent.queue_offset) == (q, base + n)

    try:
        await asyncio.gather(*(sender() for _ in range(4)))
    finally:
        await client.close()


async def _bodies(server: CrashableServer) -> dict[tuple[int, int], list[bytes]]:
    client = RemotingClient()
    try:
        return {
            (t, q): [r.body for r in await read_queue(client, server.broker, topic(t), q)]
            for t in range(TOPICS)
            for q in range(QUEUES)
        }
    finally:
        await client.close()


def expected(rounds: list[Counts]) -> dict[tuple[int, int], list[bytes]]:
    return {
        (t, q): [
            f"{r}-{t}-{q}-{n}".encode() for r, counts in enumerate(rounds) for n in range(counts[(t, q)])
        ]
        for t in range(TOPICS)
        for q in range(QUEUES)
    }


def test_queue_ends_survive_a_clean_restart_and_a_kill9(tmp_path: Path) -> None:
    conf = broker_conf(
        tmp_path / "broker.conf",
        mappedFileSizeCommitLog=1 << 20,
        mappedFileSizeConsumeQueue=UNITS_PER_FILE * 20,
    )
    server = CrashableServer(tmp_path / "data", conf)
    server.start()
    try:

        async def create() -> None:
            client = RemotingClient()
            try:
                for t in range(TOPICS):
                    await create_topic(client, server.broker, topic(t), QUEUES)
            finally:
                await client.close()

        asyncio.run(create())
        rounds = [{(t, q): first_count(t, q) for t in range(TOPICS) for q in range(QUEUES)}]
        asyncio.run(_send_round(server, rounds))
        assert server.stop() == 0
        server.start()
        assert asyncio.run(_bodies(server)) == expected(rounds)

        # A second round into every other queue, then kill -9: each acknowledged message stays at
        # the offset its answer gave, and queues not written since the restart keep their ends.
        rounds.append({(t, q): 3 if (t + q) % 2 else 0 for t in range(TOPICS) for q in range(QUEUES)})
        asyncio.run(_send_round(server, rounds))
        server.kill9()
        server.start()
        assert asyncio.run(_bodies(server)) == expected(rounds)
        # Every queue continues where it ended.
        rounds.append({(t, q): 1 for t in range(TOPICS) for q in range(QUEUES)})
        asyncio.run(_send_round(server, rounds))
        assert asyncio.run(_bodies(server)) == expected(rounds)
    finally:
        server.stop()
