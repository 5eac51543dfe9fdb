"""What replication costs a producer, and how fast a new slave copies a commit log, beside the raw speed
of the disk and of the loopback.

    .venv/bin/python bench/replication.py [--count 32000] [--batched 320000] [--copy-mib 1024] [--dir PATH]
                                          [--quick] [--only sends|copy]

In one run, every server a process of its own (`cometmq namesrv`, `cometmq broker -c broker.conf`,
ports picked by the OS), data in a temp dir under --dir (default: the system temp dir):

- the disk: --copy-mib MiB written in 1 MiB blocks, then fsync, as `dd conv=fsync` does; the loopback:
  the same bytes over one TCP connection on 127.0.0.1;
- sends of 1 KiB messages to a master alone ("no replication"), to an ASYNC_MASTER with one slave and
  to a SYNC_MASTER with one slave: 16 producers (connections), each sending one message
  (SEND_MESSAGE_V2) and waiting for its answer before the next; then batched produce, batches of 100
  (SEND_BATCH_MESSAGE) with 8 in flight. Each row gives messages/s, MB/s of bodies, the ratio to the
  same workload without replication, and the answers counted (SEND_OK, SLAVE_NOT_AVAILABLE,
  FLUSH_SLAVE_TIMEOUT). The bench stops if the master stored fewer messages than it sent, or if the
  slave's commit log does not reach the master's end afterwards;
- a new slave copying: a master whose commit log holds --copy-mib MiB (written in process before it
  starts, in one segment: an empty slave copies only the master's last segment, as in RocketMQ) and an
  empty slave with the same `mappedFileSizeCommitLog`, told the master's HA address (`haMasterAddress`);
  MB/s from the slave's launch until its `commitLogMaxOffset` (GET_BROKER_RUNTIME_INFO) equals
  the master's, beside the disk's and the loopback's. Each message carries TAGS and a UNIQ_KEY, as a
  producer's do, so the slave gives each one a consume-queue unit and an index entry;
- the ceiling of that copy: the slave's apply path alone, in process (no network, no master): the same
  segment given to an empty store's `append_replica` in 256 KiB calls, as one read of the HA stream
  hands it over. The copy cannot be faster than this on one core.

The last line gives SYNC_MASTER / ASYNC_MASTER per workload.

The machine is noisy: compare the ratios of one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from cometmq.client import AdminClient, Message, Producer
from cometmq.client._brokerapi import send_header
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import OffsetResponseHeader, QueueRequestHeader
from cometmq.protocol.ha_status import HARuntimeInfo
from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import encode_host
from cometmq.remoting import RemotingClient
from cometmq.store import MessageBatch, MessageStore, MessageToStore, StoreConfig

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "broker")]

from _support import create_topic, send_request  # noqa: E402

from processes import ServerProcess, free_port  # noqa: E402

PRODUCERS = 16
BATCH = 100
IN_FLIGHT = 8
QUEUES = 8
MIB = 1 << 20
MODES = ("no replication", "ASYNC_MASTER", "SYNC_MASTER")
ANSWERS: dict[int, str] = {
    ResponseCode.SUCCESS: "SEND_OK",
    ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
}
WAIT_S = 120.0  # for a slave to connect or catch up: far longer than either takes


# -- the disk and the loopback ------------------------------------------------------------------------


def disk_write_mb_s(directory: Path, size: int) -> float:
    """*size* bytes written in 1 MiB blocks, then one fsync, as `dd bs=1M conv=fsync` does."""
    target = directory / "disk.bin"
    block = os.urandom(MIB)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(size // MIB):
            os.write(fd, block)
        os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        target.unlink()
    return size / elapsed / 1e6


def loopback_mb_s(size: int) -> float:
    """*size* bytes over one TCP connection on 127.0.0.1 in 1 MiB writes, timed to the last byte read."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
    block = os.urandom(MIB)

    def send() -> None:
        with sender:
            for _ in range(size // MIB):
                sender.sendall(block)

    buffer = bytearray(MIB)
    received = 0
    with receiver:
        start = time.perf_counter()
        thread = threading.Thread(target=send)
        thread.start()
        while received < size // MIB * MIB:
            got = receiver.recv_into(buffer)
            if not got:
                raise SystemExit("the loopback connection closed early")
            received += got
        elapsed = time.perf_counter() - start
        thread.join()
    return received / elapsed / 1e6


# -- the servers -------------------------------------------------------------------------------------


class Servers:
    """A NameServer and brokers, each a `cometmq` process with a directory of its own under *root*."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.running: list[ServerProcess] = []
        (root / "namesrv").mkdir()
        namesrv = self._start(["namesrv", "--host", "127.0.0.1", "--port", "0"], root / "namesrv")
        found = re.search(r"listening on (\S+)", namesrv.ready_line)
        assert found is not None, namesrv.ready_line
        self.namesrv = found.group(1)

    def _start(self, args: list[str], directory: Path) -> ServerProcess:
        server = ServerProcess(args, directory / "server.log")
        self.running.append(server)
        server.wait_ready("CometMQ ", timeout=WAIT_S)
        return server

    def broker(self, label: str, **keys: object) -> tuple[ServerProcess, str]:
        """A broker on its own directory (*label*) with *keys* in its broker.conf; it and its address."""
        directory = self.root / label
        directory.mkdir(exist_ok=True)
        conf = {
            "brokerIP1": "127.0.0.1",
            "listenHost": "127.0.0.1",
            "listenPort": 0,
            "namesrvAddr": self.namesrv,
            "storePathRootDir": directory,
            **keys,
        }
        (directory / "broker.conf").write_text("".join(f"{key}={value}\n" for key, value in conf.items()))
        server = self._start(["broker", "-c", str(directory / "broker.conf")], directory)
        found = re.search(r" at (\S+) ", server.ready_line)
        assert found is not None, server.ready_line
        return server, found.group(1)

    def stop(self, server: ServerProcess) -> None:
        status = server.terminate()
        self.running.remove(server)
        if status != 0:
            raise SystemExit(f"{server.args} exited with status {status}:\n{server.log()[-3000:]}")

    def stop_all(self) -> None:
        for server in reversed(self.running):
            server.terminate()
        self.running.clear()


async def runtime_end(admin: AdminClient, addr: str) -> int:
    return int((await admin.broker_runtime_info(addr))["commitLogMaxOffset"])


async def wait_for(condition: Callable[[], Awaitable[bool]], failure: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not await condition():
        if time.monotonic() > deadline:
            raise SystemExit(failure)
        await asyncio.sleep(0.01)


async def wait_slave_connected(client: RemotingClient, master: str) -> None:
    async def connected() -> bool:
        reply = await client.invoke(master, RemotingCommand(code=RequestCode.GET_BROKER_HA_STATUS))
        if reply.code != ResponseCode.SUCCESS:
            raise SystemExit(f"the master answers GET_BROKER_HA_STATUS with {reply.code}: {reply.remark}")
        return bool(HARuntimeInfo.decode(reply.body).ha_connection_info)

    await wait_for(connected, f"no slave connected to the master at {master} within {WAIT_S:g} s")


async def wait_slave_caught_up(admin: AdminClient, master: str, slave: str) -> int:
    """Wait until the slave's commit log ends where the master's does; that end."""
    end = await runtime_end(admin, master)

    async def caught_up() -> bool:
        return await runtime_end(admin, slave) == end

    await wait_for(
        caught_up, f"the slave at {slave} did not reach the master's end {end} within {WAIT_S:g} s"
    )
    return end


# -- sends -------------------------------------------------------------------------------------------


async def stored(client: RemotingClient, addr: str, topic: str) -> int:
    total = 0
    for queue_id in range(QUEUES):
        header = QueueRequestHeader(topic=topic, queue_id=queue_id).encode()
        reply = await client.invoke(addr, RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields=header))
        total += OffsetResponseHeader.decode(reply.ext_fields).offset
    return total


def counted(reply: RemotingCommand, answers: collections.Counter[str]) -> None:
    if reply.code not in ANSWERS:
        raise SystemExit(f"a send failed: code {reply.code}, {reply.remark}")
    answers[ANSWERS[reply.code]] += 1


async def single_sends(
    addr: str, topic: str, body: bytes, count: int
) -> tuple[float, collections.Counter[str]]:
    """PRODUCERS connections, each sending one message and waiting for its answer, *count* in all."""
    clients = [RemotingClient() for _ in range(PRODUCERS)]
    answers: collections.Counter[str] = collections.Counter()
    share = count // PRODUCERS

    async def producer(client: RemotingClient, index: int) -> None:
        for i in range(share):
            counted(await client.invoke(addr, send_request(topic, body, (index + i) % QUEUES)), answers)

    try:
        for client in clients:  # connected before the clock starts
            await client.invoke(addr, send_request("BenchWarmUp", body, 0))
        start = time.perf_counter()
        await asyncio.gather(*(producer(c, i) for i, c in enumerate(clients)))
        elapsed = time.perf_counter() - start
    finally:
        for client in clients:
            await client.close()
    return share * PRODUCERS / elapsed, answers


def batch_bodies(topic: str, body: bytes) -> list[bytes]:
    """One SEND_BATCH_MESSAGE body of BATCH messages per queue, encoded as the Python producer does."""
    producer = Producer("bench_replication", "127.0.0.1:9876")  # never started: it only encodes
    bodies = []
    for _ in range(QUEUES):
        _, parts, _, _ = producer._encode_batch([Message(topic, body, tags="TagA") for _ in range(BATCH)])
        bodies.append(b"".join(parts))
    return bodies


async def batched_sends(
    addr: str, topic: str, body: bytes, count: int
) -> tuple[float, collections.Counter[str]]:
    """Batches of BATCH messages, IN_FLIGHT at a time (a connection each), *count* messages in all."""
    bodies = batch_bodies(topic, body)
    clients = [RemotingClient() for _ in range(IN_FLIGHT)]
    answers: collections.Counter[str] = collections.Counter()
    batches = iter(range(count // BATCH))

    def request(queue_id: int) -> RemotingCommand:
        header = send_header("bench_replication", topic, "", batch=True, queue_id=queue_id).encode(
            compact=True
        )
        return RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=header, body=bodies[queue_id])

    async def sender(client: RemotingClient) -> None:
        for i in batches:
            reply = await client.invoke(addr, request(i % QUEUES))
            counted(reply, answers)

    try:
        for client in clients:
            await client.invoke(addr, send_request("BenchWarmUp", body, 0))
        start = time.perf_counter()
        await asyncio.gather(*(sender(c) for c in clients))
        elapsed = time.perf_counter() - start
    finally:
        for client in clients:
            await client.close()
    # Each answer counts one batch; the rate counts messages.
    return count // BATCH * BATCH / elapsed, collections.Counter({k: v * BATCH for k, v in answers.items()})


async def mode_workloads(
    servers: Servers, mode: str, args: argparse.Namespace, body: bytes
) -> dict[str, tuple[float, collections.Counter[str]]]:
    """Both workloads against a fresh master (and slave) of *mode*."""
    label = mode.split()[0].lower()
    keys = {"brokerName": f"bench-{label}", "brokerId": 0}
    master, master_addr = servers.broker(
        f"{label}-0", brokerRole="ASYNC_MASTER" if mode == MODES[0] else mode, **keys
    )
    slave = None
    try:
        if mode != MODES[0]:
            slave, slave_addr = servers.broker(f"{label}-1", **{**keys, "brokerId": 1, "brokerRole": "SLAVE"})
        client = RemotingClient()
        results: dict[str, tuple[float, collections.Counter[str]]] = {}
        try:
            if slave is not None:
                await wait_slave_connected(client, master_addr)
            workloads = (
                (f"{PRODUCERS} producers, 1 message each", single_sends, args.count),
                (f"batches of {BATCH}, {IN_FLIGHT} in flight", batched_sends, args.batched),
            )
            for n, (name, run, count) in enumerate(workloads):
                topic = f"BenchReplication{n}"
                await create_topic(client, master_addr, topic, QUEUES)
                results[name] = await run(master_addr, topic, body, count)
                sent = sum(results[name][1].values())
                if (have := await stored(client, master_addr, topic)) != sent:
                    raise SystemExit(f"{mode}, {name}: the master stored {have} of {sent} messages")
            if slave is not None:
                async with AdminClient(servers.namesrv) as admin:
                    await wait_slave_caught_up(admin, master_addr, slave_addr)
        finally:
            await client.close()
    finally:
        if slave is not None:
            servers.stop(slave)
        servers.stop(master)
    return results


# -- a new slave copying a commit log ----------------------------------------------------------------


def fill_commit_log(directory: Path, size: int, segment: int, body: bytes) -> None:
    """A store whose commit log holds at least *size* bytes of 1 KiB messages, in one segment, each with
    the TAGS and UNIQ_KEY a producer sets (so the slave indexes every record)."""
    host = encode_host("127.0.0.1", 10911)
    batches = [
        MessageBatch.of(
            [
                MessageToStore(
                    topic="BenchCopy",
                    queue_id=queue_id,
                    flag=0,
                    body=body,
                    properties=encode_properties({"UNIQ_KEY": uniq_key, "TAGS": "TagA"}),
                    sys_flag=0,
                    born_timestamp=1_700_000_000_000,
                    born_host=host,
                    store_host=host,
                    tags_code=2598919,  # java_string_hash("TagA")
                    uniq_key=uniq_key,
                )
                for uniq_key in (f"7F00000100002A9F0000{queue_id:04X}{i:08X}" for i in range(32))
            ]
        )
        for queue_id in range(QUEUES)
    ]
    store = MessageStore(StoreConfig(directory, mapped_file_size_commitlog=segment))
    store.start()
    try:
        i = 0
        while store.commitlog_max_offset < size:
            batch = batches[i % QUEUES]
            assert batch is not None
            store.put_batch(batch)
            i += 1
    finally:
        store.shutdown()


def copy_segment(size: int) -> int:
    """The segment size of the copy's stores: room for the last batch, so the whole log is one segment."""
    return size + 64 * MIB


async def slave_copy(servers: Servers, size: int, body: bytes) -> tuple[int, float]:
    """Bytes a new slave copied and the seconds it took, from its launch to the master's end."""
    segment = copy_segment(size)
    fill_commit_log(servers.root / "copy-0", size, segment, body)
    keys = {"brokerName": "bench-copy", "mappedFileSizeCommitLog": segment}
    # The slave is told the master's HA address, so it connects as it starts rather than after it has
    # learned the address from its registration (and waited the 5 s between connection attempts).
    ha_port = free_port()
    master, master_addr = servers.broker(
        "copy-0", brokerId=0, brokerRole="ASYNC_MASTER", haListenPort=ha_port, **keys
    )
    try:
        async with AdminClient(servers.namesrv) as admin:
            end = await runtime_end(admin, master_addr)
            # From the slave's launch: it starts copying before its client port opens and it prints its
            # ready line, so a small log is copied before that line (its process start is counted).
            start = time.perf_counter()
            slave, slave_addr = servers.broker(
                "copy-1", brokerId=1, brokerRole="SLAVE", haMasterAddress=f"127.0.0.1:{ha_port}", **keys
            )
            try:
                await wait_slave_caught_up(admin, master_addr, slave_addr)
                elapsed = time.perf_counter() - start
            finally:
                servers.stop(slave)
    finally:
        servers.stop(master)
    return end, elapsed


def apply_in_process(master_dir: Path, slave_dir: Path, segment: int, piece: int) -> tuple[int, float]:
    """The slave's apply path alone, without the network or the master's sender: the master's last
    segment (``ha_readable``) given to an empty store's ``append_replica`` in *piece*-byte calls, as a
    read of the HA stream hands it over. Bytes and seconds."""
    master = MessageStore(StoreConfig(master_dir, mapped_file_size_commitlog=segment))
    master.start()
    slave = MessageStore(StoreConfig(slave_dir, mapped_file_size_commitlog=segment))
    slave.start()
    try:
        offset = begin = master.ha_start_for_empty_slave()
        end = master.replica_end()
        start = time.perf_counter()
        while offset < end:
            view = master.ha_readable(offset, piece)
            slave.append_replica(offset, view)
            offset += len(view)
            view.release()
        elapsed = time.perf_counter() - start
    finally:
        slave.shutdown()
        master.shutdown()
    return end - begin, elapsed


# -- the run -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--count", type=int, default=32_000, help="messages of the 16 producers, per mode (32000)"
    )
    parser.add_argument(
        "--batched", type=int, default=320_000, help="messages sent in batches, per mode (320000)"
    )
    parser.add_argument(
        "--copy-mib", type=int, default=1024, help="MiB of commit log the new slave copies (1024)"
    )
    parser.add_argument("--size", type=int, default=1024, help="body bytes (1024)")
    parser.add_argument("--dir", type=Path, default=None, help="where the data goes (default: a temp dir)")
    parser.add_argument(
        "--quick", action="store_true", help="a short run: 1600 + 3200 messages per mode, a 16 MiB copy"
    )
    parser.add_argument(
        "--only", choices=("sends", "copy"), default=None, help="run only the sends or only the slave copy"
    )
    args = parser.parse_args()
    if args.quick:
        args.count, args.batched, args.copy_mib = 1600, 3200, 16
    body = os.urandom(args.size)
    copy_bytes = args.copy_mib * MIB
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        disk = disk_write_mb_s(root, copy_bytes)
        loopback = loopback_mb_s(copy_bytes)
        print(
            f"disk: write+fsync of {args.copy_mib:,} MiB {disk:,.0f} MB/s; "
            f"loopback TCP, {args.copy_mib:,} MiB {loopback:,.0f} MB/s",
            flush=True,
        )
        servers = Servers(root)
        try:
            if args.only != "copy":
                print(
                    f"  {'mode':<15} {'workload':<30} {'msgs/s':>9} {'MB/s':>6} {'ratio':>6}  answers",
                    flush=True,
                )
            rates: dict[tuple[str, str], float] = {}
            for mode in MODES if args.only != "copy" else ():
                for name, (rate, answers) in asyncio.run(mode_workloads(servers, mode, args, body)).items():
                    rates[mode, name] = rate
                    ratio = rate / rates[MODES[0], name]
                    seen = ", ".join(f"{a} {answers[a]:,}" for a in ANSWERS.values() if answers[a])
                    print(
                        f"  {mode:<15} {name:<30} {rate:>9,.0f} {rate * args.size / 1e6:>6,.1f} "
                        f"{ratio:>6.2f}  {seen}",
                        flush=True,
                    )
            if args.only != "sends":
                copied, seconds = asyncio.run(slave_copy(servers, copy_bytes, body))
                copy_mb_s = copied / seconds / 1e6
                print(
                    f"slave copy: {copied / MIB:,.0f} MiB in {seconds:.2f} s: {copy_mb_s:,.0f} MB/s "
                    f"({copy_mb_s / disk:.2f} of the disk, {copy_mb_s / loopback:.2f} of the loopback)",
                    flush=True,
                )
                applied, seconds = apply_in_process(
                    root / "copy-0", root / "copy-2", copy_segment(copy_bytes), 256 * 1024
                )
                apply_mb_s = applied / seconds / 1e6
                print(
                    f"the slave's apply path alone (append_replica in process, 256 KiB calls): "
                    f"{apply_mb_s:,.0f} MB/s ({apply_mb_s / disk:.2f} of the disk)",
                    flush=True,
                )
        finally:
            servers.stop_all()
    for mode in MODES[1:] if rates else ():
        print(
            f"{mode} / no replication: "
            + ", ".join(
                f"{rates[mode, name] / rates[MODES[0], name]:.2f} ({name})" for m, name in rates if m == mode
            )
        )
    if rates:
        print(
            "SYNC_MASTER / ASYNC_MASTER: "
            + ", ".join(
                f"{rates[MODES[2], name] / rates[MODES[1], name]:.2f} ({name})"
                for m, name in rates
                if m == MODES[2]
            )
        )
    print(f"python {sys.version.split()[0]}, {args.size}-byte bodies")


if __name__ == "__main__":
    main()
