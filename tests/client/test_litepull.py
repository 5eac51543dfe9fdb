"""LitePullConsumer against a real `cometmq standalone`: assign and subscribe, seeks, commits, the
bounded ``read`` and its DataLossError, pause and resume.

Messages are sent with raw SEND_MESSAGE requests so that these tests depend on the consumer alone.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

import pytest
from client_support import poll_until, run, send_to_queue

from cometmq.client import AdminClient, LitePullConsumer
from cometmq.client._offsets import start_offset
from cometmq.client.message import MessageQueue, ReceivedMessage
from cometmq.errors import DataLossError
from processes import StandaloneServer
from waiting import wait_until


async def create_topic(server: StandaloneServer, topic: str, queues: int) -> None:
    async with AdminClient(server.namesrv) as admin:
        await admin.create_topic(topic, queues)


def by_queue(messages: list[ReceivedMessage]) -> dict[int, list[ReceivedMessage]]:
    out: dict[int, list[ReceivedMessage]] = defaultdict(list)
    for message in messages:
        out[message.queue_id].append(message)
    return out


def test_assign_and_poll_get_every_message_of_every_queue_in_queue_order(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await create_topic(server, "LpAssign", 4)
        for qid in range(4):
            await send_to_queue(server, "LpAssign", qid, [b"%d-%d" % (qid, i) for i in range(25)])
        async with LitePullConsumer("GID_lp_assign", server.namesrv, consume_from="first") as consumer:
            queues = await consumer.fetch_queues("LpAssign")
            assert [q.queue_id for q in queues] == [0, 1, 2, 3]
            consumer.assign(queues)
            got = await poll_until(consumer, 100)
            assert len(got) == 100
            for qid, messages in by_queue(got).items():
                assert [m.body for m in messages] == [b"%d-%d" % (qid, i) for i in range(25)]
                assert [m.queue_offset for m in messages] == list(range(25))
                assert all(m.topic == "LpAssign" for m in messages)
            assert all(consumer.position(q) == 25 for q in queues)
            assert await consumer.poll(timeout=0.2) == []

    run(scenario())


def test_two_subscribed_consumers_split_the_queues_and_together_get_everything_once(
    server: StandaloneServer,
) -> None:
    async def scenario() -> None:
        await create_topic(server, "LpGroup", 4)
        first = LitePullConsumer("GID_lp_group", server.namesrv, consume_from="first")
        second = LitePullConsumer("GID_lp_group", server.namesrv, consume_from="first")
        first.subscribe("LpGroup")
        second.subscribe("LpGroup")
        await first.start()
        await second.start()
        try:

            def split() -> bool:
                a, b = first.assignment(), second.assignment()
                return len(a) == 2 and len(b) == 2 and not a & b

            await wait_until(split, message="an even, disjoint split of the four queues")
            assert {q.queue_id for q in first.assignment() | second.assignment()} == {0, 1, 2, 3}
            for qid in range(4):
                await send_to_queue(server, "LpGroup", qid, [b"%d-%d" % (qid, i) for i in range(20)])
            got_first: list[ReceivedMessage] = []
            got_second: list[ReceivedMessage] = []

            async def everything_polled() -> bool:
                a, b = await asyncio.gather(first.poll(timeout=0.5), second.poll(timeout=0.5))
                got_first.extend(a)
                got_second.extend(b)
                return len(got_first) + len(got_second) >= 80

            await wait_until(everything_polled, message="all 80 messages polled")
            assert {m.queue_id for m in got_first} == {q.queue_id for q in first.assignment()}
            assert {m.queue_id for m in got_second} == {q.queue_id for q in second.assignment()}
            counts = Counter(m.body for m in got_first + got_second)
            assert counts == Counter(b"%d-%d" % (qid, i) for qid in range(4) for i in range(20))
            assert await first.poll(timeout=0.2) == [] and await second.poll(timeout=0.2) == []
        finally:
            await first.close()
            await second.close()

    run(scenario())


def test_seeks_and_offset_for_timestamp_select_the_right_messages(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await create_topic(server, "LpSeek", 1)
        for i in range(10):
            await send_to_queue(server, "LpSeek", 0, [b"m%d" % i])
            await asyncio.sleep(0.01)  # distinct store timestamps, for the timestamp search
        async with LitePullConsumer("GID_lp_seek", server.namesrv, consume_from="first") as consumer:
            (queue,) = await consumer.fetch_queues("LpSeek")
            consumer.assign([queue])
            everything = await poll_until(consumer, 10)
            assert [m.body for m in everything] == [b"m%d" % i for i in range(10)]

            consumer.seek(queue, 3)
            assert consumer.position(queue) == 3
            again = await poll_until(consumer, 7)
            assert [m.queue_offset for m in again] == list(range(3, 10))

            await consumer.seek_to_beginning(queue)
            assert consumer.position(queue) == 0
            assert [m.body for m in await poll_until(consumer, 10)] == [b"m%d" % i for i in range(10)]

            stamp = everything[6].store_timestamp
            assert everything[5].store_timestamp < stamp
            offset = await consumer.offset_for_timestamp(queue, stamp)
            assert offset == 6
            consumer.seek(queue, offset)
            assert [m.body for m in await poll_until(consumer, 4)] == [b"m6", b"m7", b"m8", b"m9"]

            consumer.seek(queue, 0)
            await consumer.seek_to_end(queue)
            assert consumer.position(queue) == 10
            assert await consumer.poll(timeout=0.5) == []
            await send_to_queue(server, "LpSeek", 0, [b"after-end"])
            assert [(m.queue_offset, m.body) for m in await poll_until(consumer, 1)] == [(10, b"after-end")]
            assert await consumer.begin_offset(queue) == 0
            assert await consumer.end_offset(queue) == 11
            # The broker's search answers the message stored nearest a time: here the earlier m5.
            # A group that starts from a time (consume_from="timestamp") starts at the first message
            # stored at or after it.
            after_m5 = everything[5].store_timestamp + 1
            assert await consumer.offset_for_timestamp(queue, after_m5) == 5
            assert await start_offset(consumer.instance, queue, "GID_lp_seek", "timestamp", after_m5) == 6

    run(scenario())


def test_commit_then_a_new_consumer_of_the_group_resumes_from_the_committed_offsets(
    server: StandaloneServer,
) -> None:
    async def scenario() -> None:
        await create_topic(server, "LpCommit", 2)
        for qid in range(2):
            await send_to_queue(server, "LpCommit", qid, [b"%d-%d" % (qid, i) for i in range(12)])
        group = "GID_lp_commit"
        async with LitePullConsumer(group, server.namesrv, auto_commit=False, consume_from="first") as first:
            q0, q1 = await first.fetch_queues("LpCommit")
            first.assign([q0, q1])
            await poll_until(first, 24)
            await first.commit()  # the positions: everything polled
            assert await first.committed(q0) == 12
            await first.commit({q0: 7, q1: 4})  # explicit offsets win
            assert (await first.committed(q0), await first.committed(q1)) == (7, 4)

        async with LitePullConsumer(group, server.namesrv, auto_commit=False) as second:
            second.assign([q0, q1])
            resumed = by_queue(await poll_until(second, 5 + 8))
            assert [m.queue_offset for m in resumed[0]] == list(range(7, 12))
            assert [m.queue_offset for m in resumed[1]] == list(range(4, 12))

    run(scenario())


def test_auto_commit_commits_the_positions_on_close(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await create_topic(server, "LpAuto", 1)
        await send_to_queue(server, "LpAuto", 0, [b"a%d" % i for i in range(15)])
        group = "GID_lp_auto"
        # An interval far beyond the test: only close() can have committed.
        consumer = LitePullConsumer(group, server.namesrv, auto_commit_interval=3600, consume_from="first")
        await consumer.start()
        (queue,) = await consumer.fetch_queues("LpAuto")
        consumer.assign([queue])
        await poll_until(consumer, 15)
        assert await consumer.committed(queue) in (None, 0)
        await consumer.close()

        async with LitePullConsumer(group, server.namesrv) as resumed:
            assert await resumed.committed(queue) == 15
            resumed.assign([queue])
            await send_to_queue(server, "LpAuto", 0, [b"new"])
            assert [(m.queue_offset, m.body) for m in await poll_until(resumed, 1)] == [(15, b"new")]

    run(scenario())


def test_read_returns_exactly_the_offsets_of_the_range(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await create_topic(server, "LpRead", 2)
        await send_to_queue(server, "LpRead", 1, [b"r%d" % i for i in range(50)])
        async with LitePullConsumer("GID_lp_read", server.namesrv) as consumer:
            queue = MessageQueue("LpRead", (await consumer.fetch_queues("LpRead"))[1].broker_name, 1)
            batches = [batch async for batch in consumer.read(queue, 10, 37, max_batch=8)]
            assert all(0 < len(batch) <= 8 for batch in batches)
            read = [m for batch in batches for m in batch]
            assert [m.queue_offset for m in read] == list(range(10, 37))
            assert [m.body for m in read] == [b"r%d" % i for i in range(10, 37)]
            whole = [m async for batch in consumer.read(queue, 0, 50) for m in batch]
            assert [m.queue_offset for m in whole] == list(range(50))
            assert [m async for batch in consumer.read(queue, 5, 5) for m in batch] == []
            # No group state is touched by read().
            assert await consumer.committed(queue) in (None, 0)

    run(scenario())


def test_read_raises_data_loss_when_retention_removed_the_start_of_the_range(tmp_path: Path) -> None:
    hour = datetime.now().hour
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "mappedFileSizeCommitLog=65536\n"
        "mappedFileSizeConsumeQueue=2000\n"
        "cleanResourceInterval=100\n"
        "fileReservedTime=1\n"
        f"deleteWhen={hour:02d};{(hour + 1) % 24:02d}\n"  # now, even across the turn of the hour
    )
    standalone = StandaloneServer(tmp_path / "data", "-c", str(conf))
    standalone.start()

    async def scenario() -> None:
        await create_topic(standalone, "LpLoss", 1)
        await send_to_queue(standalone, "LpLoss", 0, [b"z" * 1000 + b"%04d" % i for i in range(200)])
        async with LitePullConsumer("GID_lp_loss", standalone.namesrv) as consumer:
            (queue,) = await consumer.fetch_queues("LpLoss")
            # Age every commit-log segment past fileReservedTime; retention keeps the newest one.
            old = (time.time() - 2 * 3600) * 1e9
            for segment in (standalone.data_dir / "commitlog").iterdir():
                os.utime(segment, ns=(int(old), int(old)))
            new_min = await wait_until(
                lambda: consumer.begin_offset(queue), message="retention moving the min offset"
            )
            assert 0 < new_min < 200
            with pytest.raises(DataLossError) as caught:
                async for _ in consumer.read(queue, 0, 200):
                    pass
            assert (caught.value.queue, caught.value.wanted_start, caught.value.available_min) == (
                queue,
                0,
                new_min,
            )
            tail = [m async for batch in consumer.read(queue, new_min, 200) for m in batch]
            assert [m.queue_offset for m in tail] == list(range(new_min, 200))

    try:
        run(scenario())
    finally:
        standalone.stop()


def test_pause_holds_back_a_queue_until_resume(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await create_topic(server, "LpPause", 2)
        async with LitePullConsumer("GID_lp_pause", server.namesrv, consume_from="first") as consumer:
            q0, q1 = await consumer.fetch_queues("LpPause")
            consumer.assign([q0, q1])
            consumer.pause([q0])
            assert consumer.paused() == {q0}
            await send_to_queue(server, "LpPause", 0, [b"p%d" % i for i in range(10)])
            await send_to_queue(server, "LpPause", 1, [b"q%d" % i for i in range(10)])
            got = await poll_until(consumer, 10)
            assert {m.queue_id for m in got} == {1}
            assert await consumer.poll(timeout=1.0) == []
            assert consumer.position(q0) == 0

            consumer.resume([q0])
            resumed = await poll_until(consumer, 10)
            assert [m.body for m in resumed] == [b"p%d" % i for i in range(10)]

    run(scenario())


def test_waiting_polls_are_woken_by_a_message_and_one_that_finds_nothing_times_out_empty(
    server: StandaloneServer,
) -> None:
    async def scenario() -> None:
        await create_topic(server, "LpWake", 1)
        async with LitePullConsumer("GID_lp_wake", server.namesrv, consume_from="first") as consumer:
            consumer.assign(await consumer.fetch_queues("LpWake"))
            assert await consumer.poll(timeout=0.2) == []
            # Two polls wait at once; the message goes to one, the other waits on and ends empty.
            polls = [asyncio.ensure_future(consumer.poll(timeout=2.0)) for _ in range(2)]
            await send_to_queue(server, "LpWake", 0, [b"wake"])
            results = await asyncio.gather(*polls)
            assert sorted([m.body for m in got] for got in results) == [[], [b"wake"]]
            assert consumer._pollers == []

    run(scenario())


def test_a_cancelled_poll_leaves_nothing_behind_and_the_next_poll_gets_the_message(
    server: StandaloneServer,
) -> None:
    async def scenario() -> None:
        await create_topic(server, "LpCancel", 1)
        async with LitePullConsumer("GID_lp_cancel", server.namesrv, consume_from="first") as consumer:
            consumer.assign(await consumer.fetch_queues("LpCancel"))
            waiting = asyncio.ensure_future(consumer.poll(timeout=30.0))
            await wait_until(lambda: consumer._pollers, message="the poll waits")
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert consumer._pollers == []
            await send_to_queue(server, "LpCancel", 0, [b"later"])
            assert [m.body for m in await poll_until(consumer, 1)] == [b"later"]

    run(scenario())


def test_pull_ahead_stops_at_the_threshold_and_polls_take_one_batch_per_queue_in_turn(
    server: StandaloneServer,
) -> None:
    async def scenario() -> None:
        await create_topic(server, "LpTurns", 2)
        for qid in range(2):
            await send_to_queue(server, "LpTurns", qid, [b"%d-%d" % (qid, i) for i in range(16)])
        consumer = LitePullConsumer(
            "GID_lp_turns",
            server.namesrv,
            consume_from="first",
            pull_batch_size=4,
            pull_threshold_per_queue=4,
            max_poll_messages=4,
        )
        async with consumer:
            queues = await consumer.fetch_queues("LpTurns")
            consumer.assign(queues)
            states = [consumer._states[q] for q in queues]
            await wait_until(lambda: all(s.cached == 4 for s in states), message="both queues pulled")
            await asyncio.sleep(0.3)
            assert [s.cached for s in states] == [4, 4]  # nothing pulled past the threshold
            turns = []
            for _ in range(6):
                await wait_until(lambda: all(s.batches for s in states), message="both queues ready")
                got = await consumer.poll(timeout=5.0)
                assert len({m.queue_id for m in got}) == 1 and len(got) == 4
                turns.append(got[0].queue_id)
            assert turns in ([0, 1] * 3, [1, 0] * 3)

    run(scenario())
