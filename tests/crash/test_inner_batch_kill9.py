"""kill -9 of a real broker while producers send inner batches to a BatchCQ topic and single messages to
an ordinary topic, then a restart on the same data directory: every acknowledged batch is there whole at
the offsets its send was answered with, each queue's offsets are contiguous, new batches continue each
queue, and the ordinary topic keeps every acknowledged message at its offset.

The batch consume queue is rebuilt from the commit log past the checkpoint as the plain one is: the
flush thread's checkpoint lags the log by up to a second, so the restart re-dispatches the batches
stored in that second, and drops units of batches whose records did not survive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from crash_support import CrashableServer, broker_conf, expected_body, parse_body

from cometmq.client import AdminClient, LitePullConsumer, Message, Producer
from cometmq.client.message import MessageQueue
from cometmq.errors import CometMQError

pytestmark = pytest.mark.timeout(240)

TOPIC = "CrashBatchTopic"
PLAIN = "CrashPlainTopic"
QUEUES = 2
PRODUCERS = 4
BATCH = 16
ACKED_BEFORE_KILL = 150  # batches; 2400 messages of 16 B .. 4 KiB over several 1 MiB segments
SEGMENT = 1 << 20


@dataclass
class Crash:
    server: CrashableServer
    # (queue id, first offset) -> (producer, first seq) of each acknowledged batch
    acked: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    segments: int = 0
    queues: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)  # offset, body
    plain_acked: dict[int, bytes] = field(default_factory=dict)  # queue offset -> body
    plain: list[tuple[int, bytes]] = field(default_factory=list)  # offset, body


async def _producer(crash: Crash, producer: int, queue: MessageQueue, enough: asyncio.Event) -> None:
    async with Producer(f"PID_crash_batch_{producer}", crash.server.namesrv, send_timeout=5) as sender:
        seq = 0
        while True:
            msgs = [Message(TOPIC, expected_body(producer, seq + i)) for i in range(BATCH)]
            try:
                result = await sender.send_batch(msgs, queue=queue)
            except CometMQError:
                return  # the broker is gone: this batch may or may not be stored
            crash.acked[(queue.queue_id, result.queue_offset)] = (producer, seq)
            seq += BATCH
            if len(crash.acked) >= ACKED_BEFORE_KILL:
                enough.set()


async def _plain_producer(crash: Crash, queue: MessageQueue) -> None:
    async with Producer("PID_crash_plain", crash.server.namesrv, send_timeout=5) as sender:
        seq = 0
        while True:
            body = expected_body(PRODUCERS, seq)
            try:
                result = await sender.send(Message(PLAIN, body), queue=queue)
            except CometMQError:
                return  # the broker is gone
            crash.plain_acked[result.queue_offset] = body
            seq += 1


async def _send_until_killed(crash: Crash) -> None:
    async with AdminClient(crash.server.namesrv) as admin:
        await admin.create_topic(TOPIC, QUEUES, attributes="+queue.type=BatchCQ")
        await admin.create_topic(PLAIN, 1)
    async with Producer("PID_crash_batch_route", crash.server.namesrv) as probe:
        queues = await probe.fetch_publish_queues(TOPIC)
        (plain_queue,) = await probe.fetch_publish_queues(PLAIN)
    enough = asyncio.Event()
    producers = [
        asyncio.ensure_future(_producer(crash, p, queues[p % QUEUES], enough)) for p in range(PRODUCERS)
    ]
    producers.append(asyncio.ensure_future(_plain_producer(crash, plain_queue)))
    waiting = asyncio.ensure_future(enough.wait())
    await asyncio.wait([waiting, *producers], timeout=120, return_when=asyncio.FIRST_COMPLETED)
    assert enough.is_set(), f"only {len(crash.acked)} batches acknowledged"
    crash.server.kill9()
    await asyncio.wait_for(asyncio.gather(*producers), 60)


async def _read_all(crash: Crash) -> None:
    async with LitePullConsumer("GID_crash_batch_reader", crash.server.namesrv) as reader:
        for queue in await reader.fetch_queues(TOPIC):
            begin, end = await reader.begin_offset(queue), await reader.end_offset(queue)
            crash.queues[queue.queue_id] = [
                (m.queue_offset, m.body) async for batch in reader.read(queue, begin, end) for m in batch
            ]
        (queue,) = await reader.fetch_queues(PLAIN)
        begin, end = await reader.begin_offset(queue), await reader.end_offset(queue)
        crash.plain = [
            (m.queue_offset, m.body) async for batch in reader.read(queue, begin, end) for m in batch
        ]


@pytest.fixture(scope="module")
def crash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crash]:
    tmp = tmp_path_factory.mktemp("kill9-inner-batch")
    conf = broker_conf(tmp / "broker.conf", flushDiskType="ASYNC_FLUSH", mappedFileSizeCommitLog=SEGMENT)
    data = tmp / "data"
    crash = Crash(CrashableServer(data, conf))
    crash.server.start()
    try:
        asyncio.run(_send_until_killed(crash))
        crash.segments = len(list((data / "commitlog").iterdir()))
        assert (data / "abort").exists()
        crash.server.start()
        asyncio.run(_read_all(crash))
        yield crash
    finally:
        crash.server.stop()


def test_the_log_spans_segments_and_the_batch_queues_are_on_disk(crash: Crash) -> None:
    assert crash.segments >= 3
    assert sorted(p.name for p in (crash.server.data_dir / "batchconsumequeue" / TOPIC).iterdir()) == [
        "0",
        "1",
    ]


def test_every_acknowledged_batch_is_there_whole_at_its_offsets(crash: Crash) -> None:
    for (queue_id, first), (producer, seq) in crash.acked.items():
        read = dict(crash.queues[queue_id])
        for i in range(BATCH):
            assert parse_body(read[first + i]) == (producer, seq + i)


def test_queues_are_contiguous_and_hold_whole_batches_only(crash: Crash) -> None:
    for messages in crash.queues.values():
        offsets = [offset for offset, _ in messages]
        assert offsets == list(range(len(offsets)))
        assert len(offsets) % BATCH == 0
        for start in range(0, len(messages), BATCH):
            producer, seq = parse_body(messages[start][1])
            assert [parse_body(body) for _, body in messages[start : start + BATCH]] == [
                (producer, seq + i) for i in range(BATCH)
            ]


def test_new_batches_continue_each_queue(crash: Crash) -> None:
    async def scenario() -> None:
        async with Producer("PID_crash_batch_after", crash.server.namesrv) as sender:
            for queue in await sender.fetch_publish_queues(TOPIC):
                result = await sender.send_batch([Message(TOPIC, b"after")] * 3, queue=queue)
                assert result.queue_offset == len(crash.queues[queue.queue_id])

    asyncio.run(scenario())


def test_the_ordinary_topic_beside_keeps_every_acknowledged_message(crash: Crash) -> None:
    assert crash.plain_acked
    read = dict(crash.plain)
    assert [offset for offset, _ in crash.plain] == list(range(len(crash.plain)))
    for offset, body in crash.plain_acked.items():
        assert read[offset] == body
