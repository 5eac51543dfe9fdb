"""A broker out of file descriptors refuses the one send that needs a new queue file and keeps taking
the others: the flush waits for a descriptor rather than failing the store. The server raises its
soft limit of open files to the hard one at start and says the value in its start-up summary."""

from __future__ import annotations

import os
import resource
from pathlib import Path

from _support import create_topic, run, send_request

from cometmq.protocol import ResponseCode
from cometmq.remoting import RemotingClient
from processes import broker_address, start_standalone
from waiting import wait_until

OPEN_FILES = 160
QUEUES = 256  # more queue files than the limit leaves room for


def _hard_and_soft_limit_low() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


def _soft_limit_low() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(OPEN_FILES, hard), hard))


def test_the_soft_limit_of_open_files_is_raised_to_the_hard_one_and_logged(tmp_path: Path) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    server, _ = start_standalone(tmp_path / "data", preexec_fn=_soft_limit_low)
    try:
        # With no hard limit, the soft one goes up to the kernel's per-process ceiling.
        shown = (
            str(hard) if hard != resource.RLIM_INFINITY else Path("/proc/sys/fs/nr_open").read_text().strip()
        )
        run(wait_until(lambda: "open files up to " in server.log(), message="the start-up summary"))
        assert f"open files up to {shown}" in server.log()
    finally:
        server.terminate()


def test_running_out_of_descriptors_refuses_one_send_and_the_store_keeps_writing(tmp_path: Path) -> None:
    server, _ = start_standalone(tmp_path / "data", preexec_fn=_hard_and_soft_limit_low)
    addr = broker_address(server)

    def free_descriptors() -> int:
        return OPEN_FILES - len(os.listdir(f"/proc/{server.proc.pid}/fd"))

    async def scenario() -> None:
        client = RemotingClient()
        extra = RemotingClient()
        try:
            assert (await create_topic(client, addr, "Wide", QUEUES)).code == ResponseCode.SUCCESS
            # A queue file takes two descriptors (the file's and the mapping's duplicate). With an even
            # number free, the last file made takes the last two, and the flush then finds none for
            # that file's directory sync: the case where a store used to stop taking writes. One more
            # connection to the broker makes the number even.
            if free_descriptors() % 2:
                assert (await extra.invoke(addr, send_request("Wide", b"m", 0))).code == ResponseCode.SUCCESS
            assert free_descriptors() % 2 == 0
            refused = None
            for queue_id in range(QUEUES):
                sent = await client.invoke(addr, send_request("Wide", b"m", queue_id))
                if sent.code != ResponseCode.SUCCESS:
                    refused = sent
                    break
            assert refused is not None, f"{QUEUES} queue files fit in {OPEN_FILES} descriptors"
            assert refused.code == ResponseCode.SYSTEM_ERROR
            assert refused.remark is not None and "create mapped file failed" in refused.remark
            assert "RLIMIT_NOFILE" in refused.remark
            # The last queue file made took the last descriptor: its directory's sync on the flush
            # thread cannot get one. That must not stop the store.
            assert free_descriptors() == 0
            await wait_until(
                lambda: (
                    "the store flush is waiting for a file descriptor" in server.log()
                    or "store flush failed" in server.log()
                ),
                message="the flush meeting the limit",
            )
            for _ in range(3):
                sent = await client.invoke(addr, send_request("Wide", b"again", 0))
                assert sent.code == ResponseCode.SUCCESS, sent.remark
        finally:
            await client.close()
            await extra.close()

    try:
        run(scenario())
        assert "store flush failed" not in server.log()
    finally:
        server.terminate()
