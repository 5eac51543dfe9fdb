"""Failover mode: every pull, on the master and on its slaves, stops at the confirmed offset (what every
member of the in-sync set holds), and a held pull is answered once that offset reaches its message."""

from __future__ import annotations

import asyncio
from pathlib import Path

from _support import address, create_topic, held_pulls, pull, pull_request, run, send_request
from test_failover_broker import failover_broker

from cometmq.protocol import ResponseCode
from cometmq.protocol.ha import HelloAnswerDecoder, encode_hello, encode_report
from cometmq.protocol.record import decode_records
from cometmq.remoting import RemotingClient
from etcd_server import EtcdServer
from waiting import wait_until


async def identified_slave(
    port: int, broker_id: int, report: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An HA link that says hello as *broker_id*, reports *report* once, then stays silent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode_hello(broker_id, 0))
    decoder = HelloAnswerDecoder()
    while decoder.feed(await asyncio.wait_for(reader.read(1 << 16), 30)) is None:
        pass
    writer.write(encode_report(report))
    return reader, writer


def test_a_slave_reads_only_what_its_master_confirmed_and_a_held_pull_waits_for_the_confirmation(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        settings = {"brokerRole": "SYNC_MASTER", "slaveTimeout": 60_000}
        async with (
            failover_broker(tmp_path / "b1", etcd, 1, **settings) as master,
            failover_broker(tmp_path / "b2", etcd, 2, **settings) as slave,
        ):
            await wait_until(lambda: not master.is_slave and master.in_sync == {1, 2}, message="{1, 2}")
            master_addr, slave_addr = address(master), address(slave)
            assert (await create_topic(client, master_addr, "Orders", 1)).code == ResponseCode.SUCCESS
            sent = await client.invoke(master_addr, send_request("Orders", b"m0"))
            assert sent.code == ResponseCode.SUCCESS
            first_end = master.store.replica_end()
            await wait_until(
                lambda: slave.confirmed >= first_end, message="the slave to learn m0 is confirmed"
            )

            # A third member that acknowledges nothing after joining: m1 reaches the slave unconfirmed.
            _, third = await identified_slave(master.ha_port, 3, first_end)
            try:
                await wait_until(lambda: master.in_sync == {1, 2, 3}, message="broker 3 in the in-sync set")
                sending = asyncio.ensure_future(
                    client.invoke(master_addr, send_request("Orders", b"m1"), timeout=60)
                )
                await wait_until(lambda: master.store.max_offset("Orders", 0) == 2, message="m1 stored")
                end = master.store.replica_end()
                await wait_until(lambda: slave.store.replica_end() == end, message="the slave to hold m1")
                for addr in (slave_addr, master_addr):
                    response, records = await pull(client, addr, "Orders", 0, 0)
                    assert response.code == ResponseCode.SUCCESS
                    assert [record.body for record in records] == [b"m0"]
                    response, _ = await pull(client, addr, "Orders", 0, 1)
                    assert response.code == ResponseCode.PULL_NOT_FOUND
                held = [
                    asyncio.ensure_future(
                        client.invoke(addr, pull_request("Orders", 0, 1, suspend_ms=20_000), timeout=30)
                    )
                    for addr in (slave_addr, master_addr)
                ]
                await wait_until(
                    lambda: held_pulls(slave) == held_pulls(master) == 1, message="both pulls held"
                )
                assert not sending.done() and not any(task.done() for task in held)

                third.write(encode_report(end))  # broker 3 acknowledges m1: it is confirmed
                assert (await sending).code == ResponseCode.SUCCESS
                for task in held:
                    response = await task
                    assert response.code == ResponseCode.SUCCESS
                    assert [record.body for record in decode_records(response.body)] == [b"m1"]
            finally:
                third.close()
        await client.close()

    run(scenario())


def test_a_demoted_master_reads_only_up_to_its_last_confirmed_offset_until_its_handshake(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    async def scenario() -> None:
        client = RemotingClient()
        settings = {"brokerRole": "SYNC_MASTER", "slaveTimeout": 60_000}
        async with failover_broker(tmp_path / "b1", etcd, 1, **settings) as master:
            await wait_until(lambda: not master.is_slave, message="the broker founds the group")
            addr = address(master)
            assert (await create_topic(client, addr, "Orders", 1)).code == ResponseCode.SUCCESS
            assert (await client.invoke(addr, send_request("Orders", b"m0"))).code == ResponseCode.SUCCESS
            _, second = await identified_slave(master.ha_port, 2, master.store.replica_end())
            try:
                await wait_until(lambda: master.in_sync == {1, 2}, message="broker 2 in the in-sync set")
                sending = asyncio.ensure_future(
                    client.invoke(addr, send_request("Orders", b"m1"), timeout=60)
                )
                await wait_until(lambda: master.store.max_offset("Orders", 0) == 2, message="m1 stored")
                # Deposed while m1 is not confirmed, following a master it cannot reach yet.
                await master.become_slave("127.0.0.1:1", "127.0.0.1:1", master.epoch + 1)
                response, records = await pull(client, addr, "Orders", 0, 0)
                assert response.code == ResponseCode.SUCCESS
                assert [record.body for record in records] == [b"m0"]
                response, _ = await pull(client, addr, "Orders", 0, 1)
                assert response.code == ResponseCode.PULL_NOT_FOUND
                await sending
            finally:
                second.close()
        await client.close()

    run(scenario())
