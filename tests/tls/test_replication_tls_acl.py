"""A name server, a master and its slave, each a ``cometmq`` process, with TLS enforcing and access
control on everywhere: the slave registers, authenticates on the HA link and copies the master's
messages; a slave with a wrong secret is refused by the master."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from cometmq.auth import Credentials
from cometmq.protocol import ResponseCode
from cometmq.remoting import RemotingClient
from secured_servers import INIT_USER, ROOT, start_namesrv
from tls_support import Certificates, make_certificates
from waiting import wait_until, wait_until_blocking

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replication"))
from _pair import BrokerNode, create_topic, make_message, pull_request, read_queue, replicated, send

WRONG_SECRET = "N0t-the-S3cret"


def inner_credentials(credentials: Credentials) -> str:
    return json.dumps({"accessKey": credentials.access_key, "secretKey": credentials.secret_key})


def secured(certs: Certificates, credentials: Credentials = ROOT) -> dict[str, str]:
    """The settings of a server with TLS enforcing, its own connections over TLS, and ACL on."""
    return {
        **certs.server_properties("enforcing"),
        **certs.client_properties(),
        "aclEnable": "true",
        "initAuthenticationUser": INIT_USER,
        "innerClientAuthenticationCredentials": inner_credentials(credentials),
    }


def test_a_slave_copies_its_master_over_tls_with_access_control_on(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    namesrv, namesrv_addr = start_namesrv(tmp_path / "namesrv", **secured(certs))
    master = slave = None
    try:
        master = BrokerNode(
            tmp_path, "master", namesrv_addr, brokerRole="ASYNC_MASTER", **secured(certs)
        ).start()
        slave = BrokerNode(
            tmp_path, "slave", namesrv_addr, brokerRole="SLAVE", brokerId=1, **secured(certs)
        ).start()
        topic = "SecuredTopic"

        async def scenario() -> list[bytes]:
            client = RemotingClient(credentials=ROOT, ssl_context=certs.client_context())
            try:
                created = await create_topic(client, master.addr, topic, 1)
                assert created.code == ResponseCode.SUCCESS, created.remark
                for seq in range(20):
                    answer, _ = await send(client, master.addr, topic, 0, *make_message(0, seq))
                    assert answer.code == ResponseCode.SUCCESS, answer.remark
                await wait_until(
                    lambda: replicated(client, master), message="the slave to copy the master", timeout=60
                )
                await wait_until(
                    lambda: _slave_knows(client, slave.addr, topic),
                    message="the slave to know the topic",
                    timeout=60,
                )
                return [record.body for record in await read_queue(client, slave.addr, topic, 0)]
            finally:
                await client.close()

        bodies = asyncio.run(scenario())
        assert bodies == [make_message(0, seq)[0] for seq in range(20)]
        assert "refused the HA link" not in master.log()
    finally:
        for node in (slave, master):
            if node is not None:
                node.stop()
        namesrv.terminate()


async def _slave_knows(client: RemotingClient, slave: str, topic: str) -> bool:
    probe = await client.invoke(slave, pull_request(topic, 0, 0), timeout=10)
    return probe.code != ResponseCode.TOPIC_NOT_EXIST


def test_the_master_refuses_a_slave_with_a_wrong_secret(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    namesrv, namesrv_addr = start_namesrv(tmp_path / "namesrv", **secured(certs))
    master = slave = None
    try:
        master = BrokerNode(
            tmp_path, "master", namesrv_addr, brokerRole="ASYNC_MASTER", **secured(certs)
        ).start()
        # Its registrations are refused too: it is given the master's HA address.
        slave = BrokerNode(
            tmp_path,
            "slave",
            namesrv_addr,
            brokerRole="SLAVE",
            brokerId=1,
            haMasterAddress=master.ha_addr,
            **secured(certs, Credentials(ROOT.access_key, WRONG_SECRET)),
        ).start()
        assert master.ha_addr
        wait_until_blocking(
            lambda: "refused the HA link of slave" in master.log(), message="the master's refusal", timeout=60
        )
        wait_until_blocking(
            lambda: f"refused this slave's AUTH as user {ROOT.access_key}" in slave.log(),
            message="the slave's log line",
            timeout=60,
        )
        refusal = next(line for line in master.log().splitlines() if "refused the HA link of slave" in line)
        assert f"the signature of user {ROOT.access_key} does not match" in refusal, refusal
        for log in (master.log(), slave.log()):
            assert ROOT.secret_key not in log and WRONG_SECRET not in log
    finally:
        for node in (slave, master):
            if node is not None:
                node.stop()
        namesrv.terminate()
