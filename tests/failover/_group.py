"""One broker group in failover mode, each server a ``cometmq`` process of its own: a name server and
three brokers (brokerId 1, 2, 3, SYNC_MASTER, deduplicating sends) electing their master through a
real etcd; producers recording every send the brokers acknowledged, and a consumer group reading
everything.

The process-level failover tests (tests/failover/test_failover_*.py) and bench/failover.py build on
this. Every wait is on a condition; the generous timeouts only bound a run that would hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from cometmq.client import ConsumeResult, Message, Producer, PushConsumer, ReceivedMessage, SendStatus
from cometmq.client.admin import AdminClient
from cometmq.errors import CometMQError
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.ha_status import HARuntimeInfo
from cometmq.protocol.record import decode_offset_msg_id
from cometmq.remoting import RemotingClient
from processes import ServerProcess
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
from crash_support import read_queue

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import pull_request, send_request

__all__ = [
    "CLUSTER",
    "GROUP",
    "TEST_LEASE_TTL_S",
    "TOPIC",
    "Broker",
    "ConsumerGroup",
    "FailoverGroup",
    "RecordingProducer",
    "acknowledged_missing",
    "duplicates",
    "out_of_order",
    "run",
    "send_to_queue_0",
]

CLUSTER = "FailoverCluster"
GROUP = "broker-f"  # the broker name every broker of the group shares
TOPIC = "Failover"
QUEUES = 4
# Short enough for a test run of several failovers, long enough that a loaded 2-core machine keeps its
# leases alive (keepalives go every TTL/3).
TEST_LEASE_TTL_S = 3
SEGMENT_SIZE = 1 << 20
# How long a failover may take here: lease expiry, the election, the new master's registration, with
# the machine loaded. It bounds a hanging run; it is not what the tests check.
FAILOVER_TIMEOUT_S = 60.0

T = TypeVar("T")


async def until(condition: Callable[[], Awaitable[T | None]], message: str, timeout: float) -> T:
    """:func:`wait_until` for a coroutine function that answers a value (or None, False: not yet)."""
    return await wait_until(
        cast(Callable[[], Awaitable[T]], condition), message=message, timeout=timeout, interval=0.1
    )


def start_namesrv(root: Path) -> tuple[ServerProcess, str]:
    server = ServerProcess(["namesrv", "--host", "127.0.0.1", "--port", "0"], root / "namesrv.log")
    try:
        line = server.wait_ready("CometMQ namesrv ready:")
    except BaseException:
        server.terminate()
        raise
    return server, line.rsplit(" ", 1)[1]


class Broker:
    """One broker of the group: a process started (and started again) on its own data directory."""

    def __init__(self, root: Path, broker_id: int, namesrv: str, settings: dict[str, Any]) -> None:
        self.broker_id = broker_id
        self.label = f"{GROUP}-{broker_id}"
        self.data_dir = root / self.label
        self.conf = root / f"{self.label}.conf"
        self.log_path = root / f"{self.label}.log"
        self.settings = {
            "brokerClusterName": CLUSTER,
            "brokerName": GROUP,
            "brokerId": broker_id,
            "namesrvAddr": namesrv,
            **settings,
        }
        self.process: ServerProcess | None = None
        self.addr = ""
        self.paused = False
        self._log_start = 0

    def launch(self) -> None:
        """Start the process; :meth:`wait_ready` waits for it (so several start side by side)."""
        self.conf.write_text("".join(f"{key}={value}\n" for key, value in self.settings.items()))
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        args = ["broker", "-c", str(self.conf), "--data-dir", str(self.data_dir)]
        self.process = ServerProcess([*args, "--host", "127.0.0.1", "--port", "0"], self.log_path)
        self.paused = False

    def wait_ready(self) -> None:
        assert self.process is not None
        try:
            line = self.process.wait_ready("CometMQ broker ready:", timeout=120)
        except BaseException:
            self.process.terminate()
            self.process = None
            raise
        found = re.search(r" at (\S+) ", line)
        assert found is not None, line
        self.addr = found.group(1)

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    @property
    def running(self) -> bool:
        return self.process is not None and not self.paused

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.proc.pid

    def log(self) -> str:
        """The broker's log since its last start."""
        with self.log_path.open("rb") as f:
            f.seek(self._log_start)
            return f.read().decode(errors="replace")

    def kill9(self) -> None:
        assert self.process is not None
        self.process.proc.send_signal(signal.SIGKILL)
        self.process.proc.wait(30)
        self.process.terminate()
        self.process = None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets open and answers nothing until :meth:`resume`."""
        assert self.process is not None
        self.process.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.process is not None
        self.process.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.process is not None:
            self.process.proc.send_signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            self.process.terminate()
            self.process = None
            self.paused = False

    def __repr__(self) -> str:
        return f"<{self.label} at {self.addr}>"


class FailoverGroup:
    """A name server and brokers 1..``size`` of group broker-f in failover mode through ``etcd``
    (``host:port`` endpoints). Use as a context manager (it stops every process on leaving)."""

    def __init__(
        self,
        root: Path,
        etcd: Iterable[str],
        *,
        size: int = 3,
        role: str = "SYNC_MASTER",
        lease_ttl_s: int = TEST_LEASE_TTL_S,
        **settings: Any,
    ) -> None:
        self.root = root
        self.etcd = ",".join(etcd)
        self.size = size
        self.settings: dict[str, Any] = {
            "brokerRole": role,
            "etcdEndpoints": self.etcd,
            "etcdLeaseTtl": lease_ttl_s,
            "mappedFileSizeCommitLog": SEGMENT_SIZE,
            "mappedFileSizeConsumeQueue": 60_000,
            # A producer whose attempt got no answer in time (half its send timeout, a SYNC_MASTER
            # waiting for its slaves on a loaded machine) sends again to the same queue: only a broker
            # that deduplicates stores an acknowledged message exactly once, as the tests check.
            "deduplicationEnable": "true",
            **settings,
        }
        self.namesrv_process: ServerProcess | None = None
        self.namesrv = ""
        self.brokers: list[Broker] = []
        self.client = RemotingClient()

    def start(self) -> FailoverGroup:
        self.root.mkdir(parents=True, exist_ok=True)
        self.namesrv_process, self.namesrv = start_namesrv(self.root)
        self.brokers = [Broker(self.root, i, self.namesrv, self.settings) for i in range(1, self.size + 1)]
        for broker in self.brokers:
            broker.launch()
        for broker in self.brokers:
            broker.wait_ready()
        return self

    def __enter__(self) -> FailoverGroup:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for broker in self.brokers:
            broker.stop()
        if self.namesrv_process is not None:
            self.namesrv_process.terminate()
            self.namesrv_process = None

    async def aclose(self) -> None:
        """Close the group's admin connections (in the test's event loop), then :meth:`close`."""
        await self.client.close()
        self.close()

    def broker(self, broker_id: int) -> Broker:
        return self.brokers[broker_id - 1]

    def logs(self) -> str:
        """Every broker's log since its last start, for a failing assertion's message."""
        return "\n".join(f"===== {b.label}\n{b.log()[-6000:]}" for b in self.brokers)

    async def diagnosis(self) -> str:
        """Every broker's logs, then a few lines per broker of its replication state and last log lines:
        a failing wait's note, the short summary last where a shortened test report keeps it."""
        lines = [self.logs(), "===== replication state, then each broker's last log lines"]
        for broker in self.brokers:
            if broker.process is None:
                lines.append(f"{broker.label}: stopped")
                continue
            alive = broker.process.proc.poll() is None
            status = await self.ha_status(broker)
            if status is None:
                lines.append(f"{broker.label}: {'running' if alive else 'exited'}, no HA status")
            else:
                links = [(c.addr, c.slave_ack_offset, c.in_sync) for c in status.ha_connection_info]
                client = status.ha_client_runtime_info
                lines.append(
                    f"{broker.label}: {'master' if status.master else 'slave'} of epoch {status.epoch}, "
                    f"end {status.master_commit_log_max_offset}, in-sync {status.in_sync_replicas}, "
                    f"slave links {links}, following {client.master_addr or '-'} "
                    f"(connected {client.is_activated}, own end {client.max_offset})"
                )
            lines.extend(f"  {line}" for line in broker.log().splitlines()[-4:])
        return "\n".join(lines)

    # asking the brokers ----------------------------------------------------------------------------

    async def ha_status(self, broker: Broker) -> HARuntimeInfo | None:
        """The broker's replication state; None when it does not answer (not running, paused)."""
        if not broker.running:
            return None
        request = RemotingCommand(code=RequestCode.GET_BROKER_HA_STATUS)
        try:
            response = await self.client.invoke(broker.addr, request, timeout=5)
        except CometMQError:
            return None
        if response.code != ResponseCode.SUCCESS:
            return None
        return HARuntimeInfo.decode(response.body)

    async def registered_master(self) -> str | None:
        """The address the name server gives as the group's master (broker id 0)."""
        try:
            async with AdminClient(self.namesrv, timeout=5) as admin:
                info = await admin.cluster_info()
        except CometMQError:
            return None
        for broker in info.brokers_of(CLUSTER):
            if broker.broker_name == GROUP:
                return broker.master_addr
        return None

    async def master(
        self, *, other_than: Broker | None = None, timeout: float = FAILOVER_TIMEOUT_S
    ) -> Broker:
        """The group's master once it is settled: exactly one running broker says it is master, the
        name server names it, and (``other_than``) it is not that one."""

        async def settled() -> Broker | None:
            states = [(b, await self.ha_status(b)) for b in self.brokers if b.running]
            masters = [b for b, status in states if status is not None and status.master]
            if len(masters) != 1 or masters[0] is other_than:
                return None
            if await self.registered_master() != masters[0].addr:
                return None
            return masters[0]

        try:
            return await until(settled, "one master, registered", timeout)
        except AssertionError as exc:
            exc.add_note(await self.diagnosis())
            raise

    async def wait_in_sync(self, master: Broker, members: int, timeout: float = FAILOVER_TIMEOUT_S) -> None:
        """Until the master's in-sync set (as etcd holds it) has *members* brokers."""

        async def enough() -> bool:
            status = await self.ha_status(master)
            return status is not None and len(status.in_sync_replicas) >= members

        try:
            await until(enough, f"{members} brokers in sync", timeout)
        except AssertionError as exc:
            exc.add_note(await self.diagnosis())
            raise

    async def create_topic(self, topic: str = TOPIC, queues: int = QUEUES) -> Broker:
        """Create *topic* on the master and wait until every running broker knows it (the slaves
        copy the master's topics), so that whichever is elected next takes sends to it."""
        master = await self.master()
        async with AdminClient(self.namesrv, timeout=10) as admin:
            await admin.create_topic(topic, queues=queues, cluster=CLUSTER)

        async def everywhere() -> bool:
            for broker in self.brokers:
                if not broker.running:
                    continue
                probe = await self.client.invoke(broker.addr, pull_request(topic, 0, 0), timeout=10)
                if probe.code == ResponseCode.TOPIC_NOT_EXIST:
                    return False
            return True

        await until(everywhere, f"every broker to know topic {topic}", 60)
        return master

    async def stored(
        self, broker: Broker, topic: str = TOPIC, queues: int = QUEUES
    ) -> dict[int, list[bytes]]:
        """Every body of every queue of *topic* on *broker*, queue by queue, in queue order."""
        return {
            queue_id: [record.body for record in await read_queue(self.client, broker.addr, topic, queue_id)]
            for queue_id in range(queues)
        }


# ---------------------------------------------------------------------------------------------------
# clients


def send_to_queue_0(body: bytes, topic: str = TOPIC) -> RemotingCommand:
    """A raw SEND_MESSAGE_V2 of *body* to queue 0 of *topic*."""
    request: RemotingCommand = send_request(topic, body, 0)
    return request


def store_host(offset_msg_id: str) -> str:
    """The address of the broker that stored a message, from its offset message id."""
    host, port, _ = decode_offset_msg_id(offset_msg_id)
    return f"{ipaddress.ip_address(host)}:{port}"


def body_of(producer: int, seq: int) -> bytes:
    return f"p{producer}-{seq:08d}".encode()


def parse(body: bytes) -> tuple[int, int]:
    producer, seq = body.decode().split("-")
    return int(producer[1:]), int(seq)


@dataclass
class SendLog:
    """What one producer saw: the bodies acknowledged (SEND_OK) and when, and every other outcome."""

    acknowledged: list[bytes] = field(default_factory=list)
    acknowledged_at: list[float] = field(default_factory=list)  # monotonic, one per acknowledged body
    acknowledged_by: list[str] = field(default_factory=list)  # the broker address that answered
    outcomes: Counter[str] = field(default_factory=Counter)  # "SEND_OK", "FLUSH_SLAVE_TIMEOUT", "error 14", …

    def first_acknowledged_by(self, addr: str) -> float | None:
        """When the first send that the broker at *addr* stored was acknowledged (monotonic)."""
        for at, by in zip(self.acknowledged_at, self.acknowledged_by, strict=True):
            if by == addr:
                return at
        return None


class RecordingProducer:
    """A producer sending numbered messages one after the other until stopped, recording every send
    the group acknowledged (SEND_OK) and counting the other outcomes."""

    def __init__(
        self, group: FailoverGroup, number: int, *, topic: str = TOPIC, send_timeout: float = 3.0
    ) -> None:
        self.group = group
        self.number = number
        self.topic = topic
        self.log = SendLog()
        self.sent = 0
        self._producer = Producer(
            f"PID_failover_{number}", group.namesrv, send_timeout=send_timeout, retry_times=2
        )
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> RecordingProducer:
        await self._producer.start()
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while not self._stopping:
            body = body_of(self.number, self.sent)
            self.sent += 1
            try:
                result = await self._producer.send(Message(self.topic, body))
            except CometMQError as exc:
                code = getattr(exc, "code", None)
                self.log.outcomes[f"error {code}" if code is not None else type(exc).__name__] += 1
                await asyncio.sleep(0.01)  # a failing send is not retried in a tight loop
                continue
            self.log.outcomes[result.status.name] += 1
            if result.status is SendStatus.SEND_OK:
                self.log.acknowledged.append(body)
                self.log.acknowledged_at.append(time.monotonic())
                self.log.acknowledged_by.append(store_host(result.offset_msg_id))

    async def wait_acknowledged(self, count: int, timeout: float = FAILOVER_TIMEOUT_S) -> None:
        """Until *count* more sends than now are acknowledged."""
        target = len(self.log.acknowledged) + count
        await wait_until(
            lambda: len(self.log.acknowledged) >= target,
            message=f"producer {self.number}: {count} sends acknowledged ({dict(self.log.outcomes)})",
            timeout=timeout,
        )

    async def wait_acknowledged_by(self, addr: str, timeout: float = FAILOVER_TIMEOUT_S) -> None:
        """Until a send the broker at *addr* stored is acknowledged."""
        await wait_until(
            lambda: self.log.first_acknowledged_by(addr) is not None,
            message=f"producer {self.number}: a send acknowledged by {addr} ({dict(self.log.outcomes)})",
            timeout=timeout,
        )

    async def stop(self) -> SendLog:
        self._stopping = True
        if self._task is not None:
            await self._task
        await self._producer.close()
        return self.log


class ConsumerGroup:
    """A push consumer group member reading the topic from the first message, recording every body
    it was given (duplicates included)."""

    def __init__(self, group: FailoverGroup, name: str = "GID_failover", *, topic: str = TOPIC) -> None:
        self.received: list[bytes] = []
        self._consumer = PushConsumer(
            name, group.namesrv, consume_from="first", poll_name_server_interval=1.0
        )
        self._consumer.subscribe(topic)
        self._consumer.listen(self._on_messages)

    def _on_messages(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        self.received.extend(m.body for m in messages)
        return ConsumeResult.SUCCESS

    async def start(self) -> ConsumerGroup:
        await self._consumer.start()
        return self

    async def wait_received(self, bodies: Iterable[bytes], timeout: float = FAILOVER_TIMEOUT_S) -> None:
        wanted = set(bodies)
        try:
            await wait_until(
                lambda: not (wanted - set(self.received)),
                message=f"the consumer group to receive {len(wanted)} acknowledged messages",
                timeout=timeout,
                interval=0.1,
            )
        except AssertionError as exc:
            missing = sorted(wanted - set(self.received))
            exc.add_note(f"{len(missing)} not received, among them {missing[:10]}")
            raise

    def duplicates(self) -> int:
        return len(self.received) - len(set(self.received))

    async def close(self) -> None:
        with contextlib.suppress(CometMQError):
            await self._consumer.close()


# ---------------------------------------------------------------------------------------------------
# checks


def acknowledged_missing(acknowledged: Iterable[bytes], stored: dict[int, list[bytes]]) -> list[bytes]:
    """The acknowledged bodies not stored exactly once."""
    counts = Counter(body for bodies in stored.values() for body in bodies)
    return [body for body in acknowledged if counts[body] != 1]


def duplicates(stored: dict[int, list[bytes]]) -> int:
    """Bodies stored more than once (a send retried after its first attempt was stored but not
    acknowledged)."""
    counts = Counter(body for bodies in stored.values() for body in bodies)
    return sum(count - 1 for count in counts.values() if count > 1)


def out_of_order(stored: dict[int, list[bytes]]) -> list[tuple[int, bytes, bytes]]:
    """(queue, earlier, later) pairs where one producer's later message stands before an earlier one
    in a queue: each producer sends one message at a time, so its messages follow its order."""
    wrong: list[tuple[int, bytes, bytes]] = []
    for queue_id, bodies in stored.items():
        last: dict[int, tuple[int, bytes]] = {}
        for body in bodies:
            producer, seq = parse(body)
            previous = last.get(producer)
            if previous is not None and previous[0] > seq:
                wrong.append((queue_id, previous[1], body))
            if previous is None or previous[0] < seq:
                last[producer] = (seq, body)
    return wrong


def run(coro: Coroutine[Any, Any, T], timeout: float = 600.0) -> T:
    """Run one test coroutine on a fresh event loop, failing (not hanging) after ``timeout`` s."""
    return asyncio.run(asyncio.wait_for(coro, timeout))
