"""kill -9 of a real broker process while producers send, then a restart on the same data directory.

Under both flush modes a message the broker acknowledged must survive the kill: under SYNC_FLUSH
it was on disk before the reply; under ASYNC_FLUSH it was in the page cache, which outlives the
process. Sends in flight at the kill were not acknowledged and may or may not be there.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from crash_support import (
    CrashableServer,
    Sent,
    broker_conf,
    commit_offset,
    create_topic,
    expected_body,
    make_message,
    parse_body,
    properties_of,
    pull_request,
    query_offset,
    read_queue,
    run_cpp,
    send,
)

from cometmq.errors import CometMQError
from cometmq.protocol import ResponseCode
from cometmq.protocol.record import DecodedRecord
from cometmq.remoting import RemotingClient
from waiting import wait_until_blocking

pytestmark = pytest.mark.timeout(240)

TOPIC = "CrashTopic"
QUEUES = 4
PRODUCERS = 8  # the first half each write one queue, the others go round-robin over all four
ACKED_BEFORE_KILL = 2500  # about 5 MiB of bodies: the commit log spans several 1 MiB segments
SEGMENT = 1 << 20

Key = tuple[int, int]  # (producer, seq)


def queue_for(producer: int, seq: int) -> int:
    return producer % QUEUES if producer < PRODUCERS // 2 else (producer + seq) % QUEUES


@dataclass
class Crash:
    """What the producers saw before the kill, and what the restarted broker serves."""

    flush: str
    server: CrashableServer
    attempted: dict[Key, int] = field(default_factory=dict)  # every send, to its queue id
    acked: dict[Key, Sent] = field(default_factory=dict)
    queues: dict[int, list[DecodedRecord]] = field(default_factory=dict)
    segments: int = 0
    restart_log: str = ""


async def _producer(crash: Crash, producer: int, enough: asyncio.Event) -> None:
    client = RemotingClient()  # each producer its own connection
    try:
        for seq in range(1_000_000):
            queue_id = queue_for(producer, seq)
            body, properties = make_message(producer, seq)
            crash.attempted[(producer, seq)] = queue_id
            try:
                _, sent = await send(client, crash.server.broker, TOPIC, queue_id, body, properties)
            except (CometMQError, OSError):
                return  # the broker died with this send in flight: unacknowledged
            if sent is None:
                return  # refused or FLUSH_DISK_TIMEOUT: not acknowledged either
            assert sent.queue_id == queue_id
            crash.acked[(producer, seq)] = sent
            if len(crash.acked) >= ACKED_BEFORE_KILL:
                enough.set()
    finally:
        await client.close()


async def _send_until_killed(crash: Crash) -> None:
    server = crash.server
    client = RemotingClient()
    try:
        assert (await create_topic(client, server.broker, TOPIC, QUEUES)).code == ResponseCode.SUCCESS
    finally:
        await client.close()
    enough = asyncio.Event()
    producers = [asyncio.ensure_future(_producer(crash, p, enough)) for p in range(PRODUCERS)]
    waiting = asyncio.ensure_future(enough.wait())
    await asyncio.wait([waiting, *producers], timeout=120, return_when=asyncio.FIRST_COMPLETED)
    assert enough.is_set(), f"only {len(crash.acked)} sends acknowledged"
    # Each producer sends again as soon as it has an answer: all have a send in flight right now.
    assert not any(task.done() for task in producers)
    server.kill9()
    await asyncio.wait_for(asyncio.gather(*producers), 30)


async def _read_all(crash: Crash) -> None:
    client = RemotingClient()
    try:
        for queue_id in range(QUEUES):
            crash.queues[queue_id] = await read_queue(client, crash.server.broker, TOPIC, queue_id)
    finally:
        await client.close()


@pytest.fixture(scope="module", params=["ASYNC_FLUSH", "SYNC_FLUSH"])
def crash(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crash]:
    """Producers send until 2500 sends are acknowledged, the broker is killed with SIGKILL amid
    their sends, and started again on its data directory with no other step."""
    flush: str = request.param
    tmp = tmp_path_factory.mktemp(f"kill9-{flush}")
    conf = broker_conf(
        tmp / "broker.conf",
        flushDiskType=flush,
        mappedFileSizeCommitLog=SEGMENT,
        mappedFileSizeConsumeQueue=20 * 300,
    )
    data = tmp / "data"
    crash = Crash(flush, CrashableServer(data, conf))
    crash.server.start()
    try:
        asyncio.run(_send_until_killed(crash))
        crash.segments = len(list((data / "commitlog").iterdir()))
        assert (data / "abort").exists()  # a crash indeed: the next start must recover
        crash.server.start()
        crash.restart_log = crash.server.log()
        asyncio.run(_read_all(crash))
        yield crash
    finally:
        crash.server.stop()


def test_restart_recovers_by_itself_across_segments(crash: Crash) -> None:
    assert crash.segments >= 4
    assert "store was not shut down cleanly (abort file present); recovering" in crash.restart_log
    assert "recovery: scanned commit log" in crash.restart_log
    assert "Traceback" not in crash.restart_log


def test_every_acknowledged_message_is_there_once_intact_at_its_offset(crash: Crash) -> None:
    where: dict[Key, list[DecodedRecord]] = defaultdict(list)
    for records in crash.queues.values():
        for record in records:
            where[parse_body(record.body)].append(record)
    assert len(crash.acked) >= ACKED_BEFORE_KILL
    for key, sent in crash.acked.items():
        assert len(where[key]) == 1, f"acknowledged {key} found {len(where[key])} times"
        (record,) = where[key]
        body, properties = make_message(*key)
        assert record.body == body
        assert record.topic == TOPIC
        assert (record.queue_id, record.queue_offset) == (sent.queue_id, sent.queue_offset)
        assert record.commitlog_offset == sent.commitlog_offset
        assert record.offset_msg_id == sent.msg_id
        stored = properties_of(record)
        assert {name: stored.get(name) for name in properties} == properties


def test_queues_are_contiguous_and_hold_nothing_else(crash: Crash) -> None:
    seen: Counter[Key] = Counter()
    for queue_id, records in crash.queues.items():
        assert [r.queue_offset for r in records] == list(range(len(records)))
        assert all(r.queue_id == queue_id and r.topic == TOPIC for r in records)
        offsets = [r.commitlog_offset for r in records]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        for record in records:
            key = parse_body(record.body)  # intact, or it raises
            # Only what a producer sent, to the queue it sent it to, with the body it sent.
            assert crash.attempted.get(key) == queue_id, key
            assert record.body == expected_body(*key)
            seen[key] += 1
    assert max(seen.values()) == 1  # unacknowledged sends too appear at most once
    unacked_present = set(seen) - set(crash.acked)
    # At most the one send each producer had in flight at the kill.
    assert len(unacked_present) <= PRODUCERS
    assert sum(map(len, crash.queues.values())) == len(crash.acked) + len(unacked_present)


def test_each_producer_is_in_send_order(crash: Crash) -> None:
    by_producer: dict[int, list[tuple[int, DecodedRecord]]] = defaultdict(list)
    for records in crash.queues.values():
        for record in records:
            producer, seq = parse_body(record.body)
            by_producer[producer].append((seq, record))
    assert sorted(by_producer) == list(range(PRODUCERS))
    for producer, items in by_producer.items():
        items.sort(key=lambda item: item[0])
        seqs = [seq for seq, _ in items]
        # Each producer waits for an answer before its next send: what survives is a prefix.
        assert seqs == list(range(len(seqs))), producer
        assert all((producer, seq) in crash.acked for seq in seqs[:-1])
        log_offsets = [record.commitlog_offset for _, record in items]
        assert log_offsets == sorted(log_offsets)
        last_in_queue: dict[int, int] = {}
        for _, record in items:
            assert record.queue_offset > last_in_queue.get(record.queue_id, -1)
            last_in_queue[record.queue_id] = record.queue_offset


def test_new_sends_continue_each_queue(crash: Crash) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        try:
            for queue_id in range(QUEUES):
                body, properties = make_message(900, queue_id)
                _, sent = await send(client, crash.server.broker, TOPIC, queue_id, body, properties)
                assert sent is not None and sent.queue_offset == len(crash.queues[queue_id])
                tail = await read_queue(client, crash.server.broker, TOPIC, queue_id)
                assert tail[:-1] == crash.queues[queue_id]
                assert tail[-1].body == body
                crash.queues[queue_id] = tail
        finally:
            await client.close()

    asyncio.run(scenario())


@pytest.mark.interop
def test_official_cpp_push_consumer_receives_everything(crash: Crash) -> None:
    records = {(r.queue_id, r.queue_offset): r.body for rs in crash.queues.values() for r in rs}
    got = run_cpp(
        "push-consume",
        crash.server.namesrv,
        TOPIC,
        "--group",
        f"GID_after_kill9_{crash.flush}",
        "--expect",
        str(len(records)),
        "--timeout",
        "60",
    )["messages"]
    received = {(m["queue_id"], m["queue_offset"]): bytes.fromhex(m["body_hex"]) for m in got}
    assert received == records
    for message in got:
        producer, seq = parse_body(bytes.fromhex(message["body_hex"]))
        assert message["tags"] == f"tag{seq % 3}"
        assert message["keys"] == f"key-{producer}-{seq}"


# -- consumer offsets ---------------------------------------------------------------------------

GROUP = "GID_offsets"


def _offsets_on_disk(data: Path) -> dict[int, int]:
    path = data / "config" / "consumerOffset.json"
    try:
        table = json.loads(path.read_text())["offsetTable"]
    except (FileNotFoundError, ValueError, KeyError):
        return {}
    return {int(q): off for q, off in table.get(f"{TOPIC}@{GROUP}", {}).items()}


async def _fill_and_commit(server: CrashableServer, offsets: dict[int, int], create: bool) -> None:
    client = RemotingClient()
    try:
        if create:
            assert (await create_topic(client, server.broker, TOPIC, QUEUES)).code == ResponseCode.SUCCESS
            for seq in range(10 * QUEUES):
                body, properties = make_message(0, seq)
                assert (await send(client, server.broker, TOPIC, seq % QUEUES, body, properties))[1]
        for queue_id, offset in offsets.items():
            if queue_id == QUEUES - 1:
                # The other way consumers commit: a pull carrying the commit flag.
                pull = pull_request(TOPIC, queue_id, offset, group=GROUP)
                pull.ext_fields["sysFlag"] = str(int(pull.ext_fields["sysFlag"]) | 0x1)
                pull.ext_fields["commitOffset"] = str(offset)
                assert (await client.invoke(server.broker, pull, timeout=10)).code in (
                    ResponseCode.SUCCESS,
                    ResponseCode.PULL_NOT_FOUND,
                )
            else:
                await commit_offset(client, server.broker, GROUP, TOPIC, queue_id, offset)
    finally:
        await client.close()


def _query_all(server: CrashableServer) -> dict[int, int]:
    async def query() -> dict[int, int]:
        client = RemotingClient()
        try:
            return {q: await query_offset(client, server.broker, GROUP, TOPIC, q) for q in range(QUEUES)}
        finally:
            await client.close()

    return asyncio.run(query())


def test_persisted_consumer_offsets_survive_kill9(tmp_path: Path) -> None:
    conf = broker_conf(
        tmp_path / "broker.conf", mappedFileSizeCommitLog=SEGMENT, flushConsumerOffsetInterval=200
    )
    server = CrashableServer(tmp_path / "data", conf)
    server.start()
    try:
        first = {0: 3, 1: 7, 2: 10, 3: 4}
        asyncio.run(_fill_and_commit(server, first, create=True))
        # Written by the broker's own housekeeping, no clean stop involved.
        wait_until_blocking(
            lambda: _offsets_on_disk(server.data_dir) == first, message=f"offsets {first} on disk"
        )
        server.kill9()
        server.start()
        assert _query_all(server) == first
        # Commit again and kill at once, most likely inside the 200 ms interval: each offset is the
        # one committed or the one persisted before; never beyond, never gone.
        second = {0: 5, 1: 9, 2: 10, 3: 8}
        asyncio.run(_fill_and_commit(server, second, create=False))
        server.kill9()
        server.start()
        after = _query_all(server)
        assert all(after[q] in (first[q], second[q]) for q in range(QUEUES)), after
    finally:
        server.stop()


def test_offsets_committed_after_the_last_persist_roll_back_but_never_vanish(tmp_path: Path) -> None:
    # An interval no test outlives: only the clean stop persists, so the kill certainly loses the
    # commits made after it (the at-least-once window of docs/architecture.md).
    conf = broker_conf(
        tmp_path / "broker.conf", mappedFileSizeCommitLog=SEGMENT, flushConsumerOffsetInterval=3_600_000
    )
    server = CrashableServer(tmp_path / "data", conf)
    server.start()
    try:
        persisted = {0: 2, 1: 4, 2: 6, 3: 8}
        asyncio.run(_fill_and_commit(server, persisted, create=True))
        assert server.stop() == 0
        assert _offsets_on_disk(server.data_dir) == persisted
        server.start()
        asyncio.run(_fill_and_commit(server, {0: 9, 1: 9, 2: 9, 3: 9}, create=False))
        assert _query_all(server) == {0: 9, 1: 9, 2: 9, 3: 9}
        server.kill9()
        server.start()
        assert _query_all(server) == persisted
    finally:
        server.stop()
