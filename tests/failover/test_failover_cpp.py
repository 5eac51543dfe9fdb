"""The official C++ client (rocketmq==0.4.4, in a process of its own) keeps producing across a failover:
the master of a group of three brokers (SYNC_MASTER, failover through a real etcd) is killed with SIGKILL
while the C++ producer sends, and the same producer process goes on sending to the elected master once
the name server names it. Every message it was answered SEND_OK for is on the new master."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest
from _group import QUEUES, TOPIC, Broker, FailoverGroup, run

from cometmq.client.admin import offset_msg_id_address
from etcd_server import EtcdServer
from processes import read_cpp_result
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
from crash_support import CPP_SCENARIOS, read_queue

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))
from _cpp_scenarios import make_body

PREFIX = "cpp-failover-"
# The C++ client asks the name server for the route again when its connection to the killed master
# closes (its sends fail with "No route info of this topic" until the elected master registered), and
# in any case at its route refresh every 30 s, a period none of its settings changes. This bounds the
# wait for either on a loaded machine.
ROUTE_REFRESH_TIMEOUT_S = 90.0


async def stored_by(group: FailoverGroup, broker: Broker) -> dict[bytes, str]:
    """Each of the C++ producer's messages on *broker*: body → the address of the broker that wrote it
    (its offset message id's store host; a slave keeps the master's)."""
    return {
        record.body: offset_msg_id_address(record.offset_msg_id) or ""
        for queue_id in range(QUEUES)
        for record in await read_queue(group.client, broker.addr, TOPIC, queue_id)
        if record.body.startswith(PREFIX.encode())
    }


async def holds_written_by(group: FailoverGroup, holder: Broker, writer: Broker, count: int = 1) -> bool:
    """Whether *holder* has at least *count* messages of the C++ producer that *writer* wrote."""
    return sum(addr == writer.addr for addr in (await stored_by(group, holder)).values()) >= count


@pytest.mark.interop
def test_cpp_producer_sends_on_to_the_elected_master_without_a_restart(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    stop_file = tmp_path / "stop"

    async def scenario(errors: IO[str]) -> None:
        group = FailoverGroup(tmp_path / "group", etcd.endpoints).start()
        producer: subprocess.Popen[str] | None = None
        try:
            old = await group.create_topic()
            await group.wait_in_sync(old, 3)
            producer = subprocess.Popen(
                [
                    sys.executable, str(CPP_SCENARIOS), "produce", "--namesrv", group.namesrv,
                    "--topic", TOPIC, "--mode", "sync", "--pace-ms", "20", "--count", "100000",
                    "--timeout", "120", "--body-prefix", PREFIX, "--stop-file", str(stop_file),
                ],
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )  # fmt: skip
            await wait_until(
                lambda: holds_written_by(group, old, old, 10),
                message="the master to store the C++ producer's messages",
                interval=0.5,
            )
            old.kill9()
            new = await group.master(other_than=old)
            await wait_until(
                lambda: holds_written_by(group, new, new),
                message="the elected master to store a message of the C++ producer",
                timeout=ROUTE_REFRESH_TIMEOUT_S,
                interval=0.5,
            )
            assert producer.poll() is None, "the C++ producer stopped"
            stop_file.touch()
            stdout, _ = await asyncio.to_thread(producer.communicate, timeout=60)
            errors.seek(0)
            result = read_cpp_result(stdout, producer.returncode, errors.read())
            assert not result.get("watchdog"), result["errors"][-5:]

            acknowledged = [
                make_body(PREFIX, s["index"], None) for s in result["sent"] if s["status"] == "OK"
            ]
            writers = await stored_by(group, new)
            # The one producer process was answered SEND_OK by both masters.
            assert {old.addr, new.addr} <= {writers.get(body) for body in acknowledged}
            # A send the killed master stored and replicated but never answered is sent again by the C++
            # client (it retries a failed send) and stored a second time, by the new master: every
            # acknowledged message is there, one may be there twice.
            assert [body for body in acknowledged if body not in writers] == [], group.logs()
        finally:
            if producer is not None and producer.poll() is None:
                producer.kill()
                producer.communicate()
            await group.aclose()

    # stderr (the C++ library's chatter too) to a file: a full pipe would block the producer.
    with (tmp_path / "cpp-producer.err").open("w+") as errors:
        run(scenario(errors))
