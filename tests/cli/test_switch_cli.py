"""``cometmq broker promote`` and ``demote`` against scripted brokers registered with a real name server:
the epoch chosen, the request sent, the refusals; and against real brokers, a manual switch end to end."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import NotifyBrokerRoleChangedRequestHeader
from cometmq.protocol.ha_status import HARuntimeInfo
from cometmq.protocol.namesrv_headers import RegisterBrokerRequestHeader
from cometmq.protocol.route import DataVersion, RegisterBrokerBody
from cometmq.remoting import Connection, RemotingClient, RemotingServer
from processes import cometmq
from waiting import wait_until_blocking

from .cli_support import error_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replication"))
from _pair import BrokerNode, start_namesrv


class SwitchableBroker:
    """A scripted broker of group "broker-sw" registered under ``broker_id``: answers
    GET_BROKER_HA_STATUS with ``status`` (None: it does not answer at all), records every
    NOTIFY_BROKER_ROLE_CHANGED and answers it with ``refusal`` (a remark) or success."""

    def __init__(self, broker_id: int, status: HARuntimeInfo | None, refusal: str | None = None) -> None:
        self.broker_id = broker_id
        self.status = status
        self.refusal = refusal
        self.notices: list[NotifyBrokerRoleChangedRequestHeader] = []
        self.server = RemotingServer(self.handle, "127.0.0.1", 0)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == RequestCode.GET_BROKER_HA_STATUS:
            if self.status is None:
                conn.close()
                return None
            return request.response(body=self.status.encode())
        if request.code == RequestCode.NOTIFY_BROKER_ROLE_CHANGED:
            self.notices.append(NotifyBrokerRoleChangedRequestHeader.decode(request.ext_fields))
            if self.refusal is not None:
                return request.response(ResponseCode.SYSTEM_ERROR, self.refusal)
            return request.response()
        return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "scripted")

    async def register(self, client: RemotingClient, namesrv: str) -> None:
        await self.server.start()
        header = RegisterBrokerRequestHeader(
            broker_name="broker-sw",
            broker_addr=self.addr,
            cluster_name="DefaultCluster",
            ha_server_addr="127.0.0.1:1",
            broker_id=self.broker_id,
        )
        body = RegisterBrokerBody(DataVersion(timestamp=1, counter=1), {}).encode()
        request = RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=body)
        response = await client.invoke(namesrv, request)
        assert response.code == ResponseCode.SUCCESS, response.remark


def switch(command: str, target: int, *brokers: SwitchableBroker) -> subprocess.CompletedProcess[str]:
    """``cometmq broker COMMAND`` on ``brokers[target]``, all of them registered with a name server."""

    async def go() -> subprocess.CompletedProcess[str]:
        namesrv = NameServer(host="127.0.0.1", port=0)
        await namesrv.start()
        client = RemotingClient()
        ns = f"127.0.0.1:{namesrv.port}"
        try:
            for broker in brokers:
                await broker.register(client, ns)
            return await asyncio.to_thread(cometmq, "broker", command, brokers[target].addr, "-n", ns)
        finally:
            await client.close()
            for broker in brokers:
                await broker.server.stop()
            await namesrv.stop()

    return asyncio.run(go())


def slave(epoch: int) -> HARuntimeInfo:
    return HARuntimeInfo(master=False, master_commit_log_max_offset=0, epoch=epoch)


def master(epoch: int) -> HARuntimeInfo:
    return HARuntimeInfo(master=True, master_commit_log_max_offset=0, epoch=epoch)


def test_promote_makes_the_slave_master_with_the_next_epoch_of_its_group() -> None:
    gone = SwitchableBroker(0, None)  # the dead master, still registered
    chosen, other = SwitchableBroker(1, slave(3)), SwitchableBroker(2, slave(5))
    result = switch("promote", 1, gone, chosen, other)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{chosen.addr} (broker-sw) is the master from epoch 6"
    assert f"{gone.addr} did not answer: the epoch is chosen without theirs" in result.stderr
    assert chosen.notices == [
        NotifyBrokerRoleChangedRequestHeader(master_address=chosen.addr, master_epoch=6, master_broker_id=0)
    ]
    assert not other.notices


def test_promote_refuses_while_another_broker_of_the_group_answers_as_master() -> None:
    current, chosen = SwitchableBroker(0, master(2)), SwitchableBroker(1, slave(2))
    result = switch("promote", 1, current, chosen)
    assert error_line(result) == (
        f"broker-sw has a master answering at {current.addr}: demote it first "
        f"('cometmq broker demote {current.addr}'), so that two masters never take sends"
    )
    assert not chosen.notices and not current.notices


def test_demote_makes_the_master_a_slave_that_follows_the_name_servers_master() -> None:
    current, other = SwitchableBroker(0, master(4)), SwitchableBroker(1, slave(4))
    result = switch("demote", 0, current, other)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{current.addr} (broker-sw) is a slave now")
    assert current.notices == [
        NotifyBrokerRoleChangedRequestHeader(master_address="", master_epoch=4, master_broker_id=0)
    ]


def test_a_broker_that_already_has_the_role_is_left_alone() -> None:
    already = SwitchableBroker(0, master(7))
    result = switch("promote", 0, already)
    assert result.returncode == 0 and "is already the master, epoch 7" in result.stdout
    follower = SwitchableBroker(1, slave(7))
    result = switch("demote", 0, follower)
    assert result.returncode == 0 and "is already a slave, epoch 7" in result.stdout
    assert not already.notices and not follower.notices


def test_a_broker_in_failover_mode_refuses_and_the_command_says_why() -> None:
    refusal = "failover is run by etcd here (127.0.0.1:2379): roles cannot be switched by hand"
    elected = SwitchableBroker(0, master(3), refusal)
    result = switch("demote", 0, elected)
    assert error_line(result) == f"{refusal} (response code {ResponseCode.SYSTEM_ERROR})"


def test_a_broker_reporting_failover_mode_is_not_asked_to_switch() -> None:
    elected = SwitchableBroker(0, HARuntimeInfo(True, 0, epoch=3, in_sync_replicas=[1, 2], failover=True))
    result = switch("demote", 0, elected)
    assert error_line(result) == (
        f"{elected.addr} (broker-sw) runs in failover mode: etcd elects its group's master, roles are not "
        "switched by hand (stop the master to have another elected)"
    )
    assert not elected.notices


def test_an_address_no_broker_registered_is_named() -> None:
    registered = SwitchableBroker(1, slave(1))

    async def go() -> subprocess.CompletedProcess[str]:
        namesrv = NameServer(host="127.0.0.1", port=0)
        await namesrv.start()
        client = RemotingClient()
        try:
            await registered.register(client, f"127.0.0.1:{namesrv.port}")
            return await asyncio.to_thread(
                cometmq, "broker", "promote", "127.0.0.1:1", "-n", f"127.0.0.1:{namesrv.port}"
            )
        finally:
            await client.close()
            await registered.server.stop()
            await namesrv.stop()

    result = asyncio.run(go())
    assert error_line(result).startswith("no broker is registered at 127.0.0.1:1 with the name server")


def test_demote_then_promote_swaps_a_running_master_and_slave(tmp_path: Path) -> None:
    namesrv_process, namesrv = start_namesrv(tmp_path)
    # The master's brokerId 2 is the id it registers under once demoted (a master registers as 0). The
    # demoted broker learns the new master's address from a periodic registration's answer: every 1 s
    # here rather than RocketMQ's default 30 s.
    period = {"registerNameServerPeriod": 1000}
    first = BrokerNode(tmp_path, "first", namesrv, brokerId=2, brokerRole="ASYNC_MASTER", **period)
    second = BrokerNode(tmp_path, "second", namesrv, brokerId=1, brokerRole="SLAVE", **period)
    try:
        first.start()
        second.start()

        def registered() -> dict[int, str]:
            listed = json.loads(cometmq("cluster", "list", "-n", namesrv, "--json").stdout)
            return {entry["brokerId"]: entry["addr"] for entry in listed}

        wait_until_blocking(
            lambda: registered() == {0: first.addr, 1: second.addr}, message="both registered"
        )
        refused = cometmq("broker", "promote", second.addr, "-n", namesrv)
        assert error_line(refused).startswith(f"broker-a has a master answering at {first.addr}")

        demoted = cometmq("broker", "demote", first.addr, "-n", namesrv)
        assert demoted.returncode == 0, demoted.stderr
        promoted = cometmq("broker", "promote", second.addr, "-n", namesrv)
        assert promoted.returncode == 0, promoted.stderr
        assert promoted.stdout.strip() == f"{second.addr} (broker-a) is the master from epoch 2"

        wait_until_blocking(lambda: registered() == {0: second.addr, 2: first.addr}, message="swapped")

        def roles() -> list[tuple[int, str, int]]:
            listed = json.loads(cometmq("cluster", "list", "-n", namesrv, "--json").stdout)
            return [(e["brokerId"], e["role"], e["epoch"]) for e in listed]

        # The demoted broker takes the new master's epoch history once it connects to it.
        expected = [(0, "ASYNC_MASTER", 2), (2, "SLAVE", 2)]
        try:
            wait_until_blocking(lambda: roles() == expected, message=f"cluster list to show {expected}")
        except AssertionError as exc:
            exc.add_note(f"shown: {roles()}")
            raise
    finally:
        second.stop()
        first.stop()
        namesrv_process.terminate()
