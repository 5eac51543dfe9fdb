"""A slave that learns its master from the NameServer's answer connects to it at once, not after its
reconnect interval (a SYNC_MASTER's sends wait for that slave)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from cometmq.namesrv import NameServer
from cometmq.replication import _slave
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
from _support import running_broker


def test_a_slave_connects_as_soon_as_the_registration_names_its_master(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Far longer than any wait below: only the learned address can start the connection.
    monkeypatch.setattr(_slave, "RECONNECT_INTERVAL_S", 3600.0)

    async def scenario() -> None:
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        ns_addr = f"127.0.0.1:{namesrv.port}"
        try:
            # The slave starts first: its HA client finds no master and waits to try again.
            async with (
                running_broker(
                    tmp_path / "slave",
                    namesrvAddr=ns_addr,
                    brokerRole="SLAVE",
                    brokerId=1,
                    registerNameServerPeriod=200,
                ) as slave,
                running_broker(tmp_path / "master", namesrvAddr=ns_addr) as master,
            ):
                assert master.ha_server is not None
                await wait_until(
                    lambda: slave.master_ha_addr is not None, message="the slave to learn its master"
                )
                await wait_until(
                    lambda: bool(master.ha_server and master.ha_server.runtime_info().ha_connection_info),
                    message="the slave to connect to its master",
                )
                assert slave.master_ha_addr == f"127.0.0.1:{master.ha_server.port}"
        finally:
            await namesrv.stop()

    asyncio.run(scenario())
