"""A slave's batch consume queues are its master's: replicated records of a BatchCQ topic get the same
46-byte units, byte for byte, whether inner batches or single messages, mixed with an ordinary topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

from _stores import put, replicating, stores, texts
from store_testlib import SMALL_COMMITLOG, make_msg

from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.protocol.record import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG
from cometmq.store import MessageStore, PutStatus
from cometmq.store.format import BCQ_UNIT_SIZE
from waiting import wait_until

BATCHED = "ReplicatedBatches"


def put_inner_batch(store: MessageStore, count: int, queue_id: int) -> None:
    body = encode_batch_body([BatchEntry(0, b"x" * (i * 7 % 50), "") for i in range(count)])
    msg = make_msg(
        BATCHED, queue_id, body, f"INNER_NUM\x01{count}", sys_flag=INNER_BATCH_FLAG | NEED_UNWRAP_FLAG
    )
    assert store.put_inner_batch(msg, count).status is PutStatus.PUT_OK


def unit_files(root: Path) -> dict[str, bytes]:
    """Each batch consume-queue file's units (the written part)."""
    out = {}
    for path in sorted((root / "batchconsumequeue").rglob("0000*")):
        data = path.read_bytes()
        end = len(data.rstrip(b"\0"))
        out[str(path.relative_to(root))] = data[: end + (-end % BCQ_UNIT_SIZE)]
    return out


def test_the_slaves_batch_consume_queues_equal_the_masters(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "master", "slave") as (master, slave):
            master.begin_epoch(1)
            master.declare_batch_topic(BATCHED)
            slave.declare_batch_topic(BATCHED)  # a slave broker learns it from the master's topic table
            # Within the first segment: an empty slave copies from the master's last segment on.
            for k in range(60):
                put_inner_batch(master, 1 + k % 9, k % 2)
                if k % 10 == 0:
                    assert master.put(make_msg(BATCHED, 0, b"single %d" % k)).status is PutStatus.PUT_OK
                    put(master, f"plain {k}")
            async with replicating(master, 1, slave, 2):
                await wait_until(lambda: slave.replica_end() == master.replica_end(), message="the copy")
                for _ in range(5):  # and while it follows
                    put_inner_batch(master, 3, 1)
                await wait_until(lambda: slave.replica_end() == master.replica_end(), message="the rest")
            assert master.replica_end() < SMALL_COMMITLOG
            for queue_id in (0, 1):
                assert slave.max_offset(BATCHED, queue_id) == master.max_offset(BATCHED, queue_id)
                assert slave.min_offset(BATCHED, queue_id) == 0
            assert texts(slave) == texts(master) == [f"plain {k}" for k in range(0, 60, 10)]
        assert unit_files(tmp_path / "slave") == unit_files(tmp_path / "master") != {}

    asyncio.run(scenario())


def test_an_empty_slave_begins_its_batch_queue_at_its_first_record(tmp_path: Path) -> None:
    """An empty slave copies from the master's last segment on: its queue begins at the base offset of
    the first record it holds, with the master's units from there."""

    async def scenario() -> None:
        with stores(tmp_path, "master", "slave") as (master, slave):
            master.begin_epoch(1)
            for k in range(400):
                put_inner_batch(master, 1 + k % 9, 0)
            assert master.replica_end() > 2 * SMALL_COMMITLOG
            async with replicating(master, 1, slave, 2):
                await wait_until(lambda: slave.replica_end() == master.replica_end(), message="the copy")
            mine = slave._batch_queues.get(BATCHED, 0)
            theirs = master._batch_queues.get(BATCHED, 0)
            assert mine is not None and theirs is not None
            first = mine.min_offset
            assert 0 < first < theirs.max_offset == mine.max_offset
            start = theirs.unit_index(first)
            assert [mine.unit(i) for i in range(mine.units)] == [
                theirs.unit(i) for i in range(start, theirs.units)
            ]
            assert mine.unit(0)[0] >= slave.commitlog_min_offset

    asyncio.run(scenario())


def test_a_slave_that_learns_the_topic_type_after_its_records_has_the_masters_queues(tmp_path: Path) -> None:
    """The master's topic table reaches a slave some seconds after the master's records may: single
    messages that came first, in ordinary queues then, move to the batch queue when the first inner
    batch arrives (queue 0) or when the topic is declared (queue 1, singles only)."""

    async def scenario() -> None:
        with stores(tmp_path, "master", "slave") as (master, slave):
            master.begin_epoch(1)
            master.declare_batch_topic(BATCHED)
            for k in range(3):
                for queue_id in (0, 1):
                    assert (
                        master.put(make_msg(BATCHED, queue_id, b"single %d" % k)).status is PutStatus.PUT_OK
                    )
            put(master, "plain")
            put_inner_batch(master, 4, 0)
            async with replicating(master, 1, slave, 2):
                await wait_until(lambda: slave.replica_end() == master.replica_end(), message="the copy")
                assert slave.is_batch_topic(BATCHED)
                slave.declare_batch_topic(BATCHED)  # the master's topic table, later
                put_inner_batch(master, 2, 1)
                await wait_until(lambda: slave.replica_end() == master.replica_end(), message="the rest")
            for queue_id, end in ((0, 7), (1, 5)):
                assert (slave.min_offset(BATCHED, queue_id), slave.max_offset(BATCHED, queue_id)) == (0, end)
                assert master.max_offset(BATCHED, queue_id) == end
            assert texts(slave) == texts(master) == ["plain"]
        assert unit_files(tmp_path / "slave") == unit_files(tmp_path / "master") != {}
        assert not (tmp_path / "slave" / "consumequeue" / BATCHED).exists()

    asyncio.run(scenario())


def test_a_slave_declared_after_single_messages_only_moves_them_to_its_batch_queue(tmp_path: Path) -> None:
    async def scenario() -> None:
        with stores(tmp_path, "master", "slave") as (master, slave):
            master.begin_epoch(1)
            master.declare_batch_topic(BATCHED)
            for k in range(5):
                assert master.put(make_msg(BATCHED, 0, b"single %d" % k)).status is PutStatus.PUT_OK
            async with replicating(master, 1, slave, 2):
                await wait_until(lambda: slave.replica_end() == master.replica_end(), message="the copy")
            assert not slave.is_batch_topic(BATCHED)
            slave.declare_batch_topic(BATCHED)
            assert (slave.min_offset(BATCHED, 0), slave.max_offset(BATCHED, 0)) == (0, 5)
        assert unit_files(tmp_path / "slave") == unit_files(tmp_path / "master") != {}

    asyncio.run(scenario())
