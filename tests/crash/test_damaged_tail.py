"""A damaged commit-log tail (torn, bit-flipped, zero-filled) on a stopped broker's data directory.

The broker must start with no manual step, serve every record before the damage exactly as it was,
serve nothing at or after it, carry on writing at the cut, and say in its log what it dropped. The
damage is done after a clean stop (whose checkpoint the next start would like to trust) and after a
kill -9.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from crash_support import CrashableServer, broker_conf, create_topic, make_message, read_queue, send

from cometmq.protocol import ResponseCode
from cometmq.protocol.record import DecodedRecord
from cometmq.remoting import RemotingClient

pytestmark = pytest.mark.timeout(120)

TOPIC = "TailTopic"
QUEUES = 2
MESSAGES = 150  # about 330 KiB: three segments of 128 KiB
SEGMENT = 128 * 1024
# Where fields sit in a record (docs/store.md, Commit log).
TOTALSIZE, MAGICCODE, BODYCRC, PHYSICALOFFSET, BODY = 0, 4, 8, 28, 88


@dataclass
class Pristine:
    """A data directory holding MESSAGES acknowledged messages, and those records as pulled."""

    data: Path
    conf: Path
    records: list[DecodedRecord]  # in commit-log order


async def _fill(server: CrashableServer) -> list[DecodedRecord]:
    client = RemotingClient()
    try:
        assert (await create_topic(client, server.broker, TOPIC, QUEUES)).code == ResponseCode.SUCCESS
        for seq in range(MESSAGES):
            body, properties = make_message(1, seq)
            _, sent = await send(client, server.broker, TOPIC, seq % QUEUES, body, properties)
            assert sent is not None
        records = [r for q in range(QUEUES) for r in await read_queue(client, server.broker, TOPIC, q)]
    finally:
        await client.close()
    assert len(records) == MESSAGES
    return sorted(records, key=lambda r: r.commitlog_offset)


@pytest.fixture(scope="module", params=["clean-stop", "kill-9"])
def pristine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    tmp = tmp_path_factory.mktemp(f"pristine-{request.param}")
    conf = broker_conf(tmp / "broker.conf", mappedFileSizeCommitLog=SEGMENT, mappedFileSizeConsumeQueue=6000)
    server = CrashableServer(tmp / "data", conf)
    server.start()
    try:
        records = asyncio.run(_fill(server))
    except BaseException:
        server.stop()
        raise
    if request.param == "kill-9":
        server.kill9()
    else:
        assert server.stop() == 0
    assert (server.data_dir / "abort").exists() == (request.param == "kill-9")
    return Pristine(server.data_dir, conf, records)


@dataclass
class Damage:
    """How to damage the segment file; the log must end at the start of ``victim``."""

    segment: Path
    victim: DecodedRecord
    later: list[DecodedRecord]  # the records after the victim (also lost)

    def flip(self, record: DecodedRecord, field: int, length: int = 4) -> None:
        with self.segment.open("r+b") as f:
            f.seek(record.commitlog_offset % SEGMENT + field)
            data = f.read(length)
            f.seek(-length, 1)
            f.write(bytes(b ^ 0xA5 for b in data))

    def middle(self) -> int:
        return self.victim.commitlog_offset % SEGMENT + self.victim.total_size // 2


def truncate(d: Damage) -> None:
    with d.segment.open("r+b") as f:
        f.truncate(d.middle())


def zero_tail(d: Damage) -> None:
    size = d.segment.stat().st_size
    with d.segment.open("r+b") as f:
        f.seek(d.middle())
        f.write(bytes(size - d.middle()))


def flip_body(d: Damage) -> None:
    for record in (d.victim, d.later[-1]):
        d.flip(record, BODY + len(record.body) // 2)


def flip_header(field: int) -> Callable[[Damage], None]:
    def damage(d: Damage) -> None:
        d.flip(d.victim, field)
        d.flip(d.later[0], field)

    return damage


DAMAGES: dict[str, Callable[[Damage], None]] = {
    "truncate-mid-record": truncate,
    "zero-fill-from-mid-record": zero_tail,
    "flip-body": flip_body,
    "flip-totalsize": flip_header(TOTALSIZE),
    "flip-magic": flip_header(MAGICCODE),
    "flip-bodycrc": flip_header(BODYCRC),
    "flip-physicaloffset": flip_header(PHYSICALOFFSET + 4),
}


async def _serve_and_continue(
    server: CrashableServer, kept: dict[int, list[DecodedRecord]], cut: int
) -> None:
    client = RemotingClient()
    try:
        for queue_id in range(QUEUES):
            assert await read_queue(client, server.broker, TOPIC, queue_id) == kept[queue_id]
        # New sends get the next queue offsets; the first lands exactly where the log was cut.
        for queue_id in range(QUEUES):
            body, properties = make_message(2, queue_id)
            _, sent = await send(client, server.broker, TOPIC, queue_id, body, properties)
            assert sent is not None
            assert sent.queue_offset == len(kept[queue_id])
            if queue_id == 0:
                assert sent.commitlog_offset == cut
            records = await read_queue(client, server.broker, TOPIC, queue_id)
            assert records[:-1] == kept[queue_id] and records[-1].body == body
            kept[queue_id] = records
    finally:
        await client.close()


async def _read_all(server: CrashableServer) -> dict[int, list[DecodedRecord]]:
    client = RemotingClient()
    try:
        return {q: await read_queue(client, server.broker, TOPIC, q) for q in range(QUEUES)}
    finally:
        await client.close()


@pytest.mark.parametrize("damage", DAMAGES)
def test_broker_starts_keeps_what_precedes_the_damage_and_logs_the_cut(
    pristine: Pristine, tmp_path: Path, damage: str
) -> None:
    data = tmp_path / "data"
    shutil.copytree(pristine.data, data)
    records = pristine.records
    victim = records[-3]
    segment = data / "commitlog" / f"{victim.commitlog_offset - victim.commitlog_offset % SEGMENT:020d}"
    assert records[-1].commitlog_offset // SEGMENT == victim.commitlog_offset // SEGMENT
    DAMAGES[damage](Damage(segment, victim, records[-2:]))
    cut = victim.commitlog_offset

    server = CrashableServer(data, pristine.conf)
    server.start()  # no manual step
    try:
        kept = {
            q: [r for r in records if r.queue_id == q and r.commitlog_offset < cut] for q in range(QUEUES)
        }
        asyncio.run(_serve_and_continue(server, kept, cut))
        log = server.log()
        assert server.stop() == 0
        # The repaired log passes the clean start's check, and stale bytes past the cut never
        # come back.
        server.start()
        assert "store opened after a clean shutdown" in server.log()
        assert asyncio.run(_read_all(server)) == kept
    finally:
        server.stop()

    assert "Traceback" not in log
    assert f"tail after {cut} zeroed" in log
    for queue_id in range(QUEUES):
        lost = [r for r in records if r.queue_id == queue_id and r.commitlog_offset >= cut]
        if lost:
            first, end = lost[0].queue_offset, lost[-1].queue_offset + 1
            assert (
                f"dropping {end - first} unit(s) [{first}, {end}) of {TOPIC}/{queue_id}: "
                "beyond the commit log's end"
            ) in log
    if damage.startswith("truncate"):
        assert f"extending short commit-log segment {segment}" in log
    else:
        assert f"recovery: commit log ends at {cut}" in log  # and why
    if not (pristine.data / "abort").exists() and not damage.startswith("truncate"):
        # After a clean stop the checkpoint alone would have served the damaged records.
        end = records[-1].commitlog_offset + records[-1].total_size
        assert (
            f"the clean-shutdown checkpoint ends the commit log at {end}, but its valid records end at {cut}"
            in log
        )
