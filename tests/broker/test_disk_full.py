"""A broker whose disk fills up, on a real small filesystem (a 64 MiB tmpfs): it never dies, refuses
sends with SERVICE_NOT_AVAILABLE (14) and a remark saying how full the disk is, keeps serving pulls of
what it stored, serves a consumer group and a topic created while its metadata cannot be written
(and writes them down later), and takes writes again by itself once space is back, having lost
nothing it acknowledged."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import create_topic, pull, send_request

from cometmq.protocol import RemotingCommand, ResponseCode
from cometmq.remoting import RemotingClient
from processes import ServerProcess, broker_address, standalone_args
from small_disk import fill, mounted_tmpfs
from waiting import wait_until

SEGMENT = 16 << 20  # a commit-log segment: a quarter of the disk
BODY = 16 << 10
DISK_FULL = re.compile(r"^disk full: \d+\.\d% of \S+ used")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", 64) as mount_point:
        yield mount_point


def on_disk(data_dir: Path, name: str) -> str:
    """The content of the broker's metadata file *name*; empty if it is not there."""
    path = data_dir / "config" / name
    return path.read_text() if path.exists() else ""


class Producer:
    """Fast senders of numbered messages to one queue; what was acknowledged, and the refusals."""

    def __init__(self, client: RemotingClient, addr: str, topic: str) -> None:
        self.client = client
        self.addr = addr
        self.topic = topic
        self.sent = 0
        self.acked: dict[int, bytes] = {}  # queue offset → body
        self.refusals: list[RemotingCommand] = []

    async def send_one(self) -> RemotingCommand:
        self.sent += 1
        body = f"message {self.sent:08d} ".encode().ljust(BODY, b"x")
        response = await self.client.invoke(self.addr, send_request(self.topic, body))
        if response.code == ResponseCode.SUCCESS:
            self.acked[int(response.ext_fields["queueOffset"])] = body
        else:
            self.refusals.append(response)
        return response

    async def until_refused(self, refusals: int, senders: int = 8) -> None:
        async def sender() -> None:
            while len(self.refusals) < refusals:
                await self.send_one()

        await asyncio.gather(*(sender() for _ in range(senders)))


async def read_all(client: RemotingClient, addr: str, topic: str, group: str, end: int) -> dict[int, bytes]:
    stored: dict[int, bytes] = {}
    offset = 0
    while offset < end:
        response, records = await pull(client, addr, topic, 0, offset, group=group)
        assert response.code == ResponseCode.SUCCESS, response.remark
        for rec in records:
            stored[rec.queue_offset] = bytes(rec.body)
        offset = int(response.ext_fields["nextBeginOffset"])
    return stored


@pytest.mark.parametrize("flush_disk_type", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_full_disk_refuses_sends_with_code_14_keeps_serving_and_resumes_losing_nothing(
    small_disk: Path, tmp_path: Path, flush_disk_type: str
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"flushDiskType={flush_disk_type}\n"
        f"mappedFileSizeCommitLog={SEGMENT}\n"
        "mappedFileSizeConsumeQueue=60000\n"
        "maxIndexNum=10000\n"
        "flushConsumerOffsetInterval=1000\n"
    )
    data_dir = small_disk / "data"
    server = start_broker(data_dir, conf, tmp_path / "broker.log")  # the log: not on the small disk
    try:
        acked = asyncio.run(_scenario(broker_address(server), small_disk, data_dir))
        assert server.proc.poll() is None, server.log()
    finally:
        code = server.terminate()
    log = server.log()
    assert code == 0, log
    assert "Traceback" not in log
    # A line when writes start being refused (for each reason), not one per refused send; the same
    # for the metadata file the broker could not write, however often it tried.
    assert log.count("refusing writes") <= 4, log
    for name in ("subscriptionGroup.json", "topics.json"):
        assert log.count(f"cannot write {data_dir / 'config' / name}") == 1, log

    # The refused sends left nothing that keeps the store from starting again with all it acked.
    server = start_broker(data_dir, conf, tmp_path / "broker-again.log")
    try:
        assert asyncio.run(_read_again(broker_address(server), max(acked) + 1)) == acked
    finally:
        server.terminate()


def start_broker(data_dir: Path, conf: Path, log_path: Path) -> ServerProcess:
    server = ServerProcess(standalone_args(data_dir, "-c", str(conf)), log_path)
    try:
        server.wait_ready("CometMQ standalone ready:")
    except BaseException:
        server.terminate()
        raise
    return server


async def _read_again(addr: str, end: int) -> dict[int, bytes]:
    client = RemotingClient()
    try:
        return await read_all(client, addr, "FULL", "CG-RESTART", end)
    finally:
        await client.close()


async def _scenario(addr: str, disk: Path, data_dir: Path) -> dict[int, bytes]:
    client = RemotingClient()
    try:
        created = await create_topic(client, addr, "FULL", queues=1)
        assert created.code == ResponseCode.SUCCESS, created.remark
        producer = Producer(client, addr, "FULL")

        # Less room than the rest of the segment needs, though the disk is below the guard's 90 %:
        # sends are refused once their blocks cannot be reserved.
        fill(disk / "filler", leave=SEGMENT // 2)
        await producer.until_refused(20)
        assert len(producer.acked) >= 100  # the blocks reserved while there was room took them
        for refusal in producer.refusals:
            assert refusal.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert DISK_FULL.match(refusal.remark or ""), refusal.remark
        assert [path.name for path in (data_dir / "commitlog").iterdir()] == [f"{0:020d}"]

        # Now the disk is full to the last block: metadata writes fail too, and the disk guard
        # refuses sends by the disk's usage as soon as a refused send looks at the disk again.
        fill(disk / "filler-2")

        async def refused_by_the_guard() -> bool:
            response = await producer.send_one()
            return "(limit 90%)" in (response.remark or "")

        await wait_until(refused_by_the_guard, message="a send refused by the disk guard")
        assert DISK_FULL.match(producer.refusals[-1].remark or ""), producer.refusals[-1].remark
        assert all(r.code == ResponseCode.SERVICE_NOT_AVAILABLE for r in producer.refusals)
        end = max(producer.acked) + 1
        assert sorted(producer.acked) == list(range(end))
        # Reads go on, also for a consumer group the broker creates now and cannot write down.
        assert await read_all(client, addr, "FULL", "CG-NEW", end) == producer.acked
        assert "CG-NEW" not in on_disk(data_dir, "subscriptionGroup.json")
        # So does an administrator's topic creation: the topic exists at once.
        created = await create_topic(client, addr, "CREATED-FULL", queues=1)
        assert created.code == ResponseCode.SUCCESS, created.remark
        assert "CREATED-FULL" not in on_disk(data_dir, "topics.json")

        # Space comes back: sends are accepted again without anyone's help.
        (disk / "filler").unlink()
        (disk / "filler-2").unlink()

        async def accepted() -> bool:
            return (await producer.send_one()).code == ResponseCode.SUCCESS

        await wait_until(accepted, message="a send accepted after space came back")
        for _ in range(50):
            response = await producer.send_one()
            assert response.code == ResponseCode.SUCCESS, response.remark
        end = max(producer.acked) + 1
        assert sorted(producer.acked) == list(range(end))
        assert await read_all(client, addr, "FULL", "CG-AFTER", end) == producer.acked
        # The group created while the disk was full is written down once it can be.
        await wait_until(
            lambda: "CG-NEW" in on_disk(data_dir, "subscriptionGroup.json"),
            message="subscriptionGroup.json written again",
        )
        await wait_until(
            lambda: "CREATED-FULL" in on_disk(data_dir, "topics.json"), message="topics.json written again"
        )
        return producer.acked
    finally:
        await client.close()
