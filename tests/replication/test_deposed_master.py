"""Two brokers in one process, with static roles swapped by hand: a master that went on taking sends
after its slave was promoted (a split brain) cuts that tail when it is demoted and follows the new
master, whose history it then shares."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest
from _stores import texts

from cometmq.protocol import ResponseCode
from cometmq.remoting import RemotingClient
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import address, create_topic, running_broker, send_request

TOPIC = "Replicated"  # the topic _stores.texts reads


async def send_all(client: RemotingClient, addr: str, *bodies: str) -> None:
    for body in bodies:
        answer = await client.invoke(addr, send_request(TOPIC, body.encode()))
        assert answer.code == ResponseCode.SUCCESS, answer.remark


def test_a_deposed_master_cuts_the_sends_it_took_alone_and_follows_the_new_master(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cometmq.replication")

    async def scenario() -> tuple[int, int]:
        client = RemotingClient()
        async with running_broker(tmp_path / "a", brokerId=2) as first:
            first_ha = f"127.0.0.1:{first.ha_port}"
            slave_settings = {"brokerRole": "SLAVE", "brokerId": 1, "haMasterAddress": first_ha}
            async with running_broker(tmp_path / "b", **slave_settings) as second:
                first_addr, second_addr = address(first), address(second)
                assert (await create_topic(client, first_addr, TOPIC, 1)).code == ResponseCode.SUCCESS
                await send_all(client, first_addr, "before 0", "before 1", "before 2")
                shared = first.store.replica_end()
                await wait_until(lambda: second.store.replica_end() == shared, message="the slave's copy")

                await second.become_master(first.epoch + 1)
                await send_all(client, first_addr, "alone 0" * 20, "alone 1" * 20)  # nobody copies these
                assert (await create_topic(client, second_addr, TOPIC, 1)).code == ResponseCode.SUCCESS
                await send_all(client, second_addr, "after 0", "after 1", "after 2")

                diverged = first.store.replica_end()
                await first.become_slave(second_addr, f"127.0.0.1:{second.ha_port}", second.epoch)
                await wait_until(lambda: texts(first.store) == texts(second.store), message="the follow")
                await wait_until(
                    lambda: first.store.replica_end() == second.store.replica_end(), message="the same end"
                )
                assert texts(first.store) == [
                    *(f"before {i}" for i in range(3)),
                    *(f"after {i}" for i in range(3)),
                ]
                assert first.store.epochs() == second.store.epochs()
                assert second.store.epochs()[-1].start_offset == shared
        await client.close()
        return shared, diverged

    shared, diverged = asyncio.run(scenario())
    cut = [m for m in caplog.messages if m.startswith("cut this slave's commit log")]
    assert len(cut) == 1, caplog.messages
    assert f"from offset {diverged} back to {shared} ({diverged - shared} bytes)" in cut[0]
    assert "written in epoch 1, the master is at epoch 2" in cut[0]
