"""``cometmq user …`` and ``cometmq acl …`` against a standalone with aclEnable: a user and its ACL
made, shown, changed and deleted with the CLI, on the broker and the name server alike (one line per
server), and a client signing as that user allowed and refused as the ACL says."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cometmq.auth import Credentials
from cometmq.client import Message, blocking
from cometmq.errors import BrokerError
from processes import COMMAND, StandaloneServer, broker_address, cometmq, subprocess_env
from secured_servers import ADMIN, ROOT, secured_standalone, separate_secured_servers

TOPIC = "CliAclTopic"
ALICE = Credentials("alice", "alice-secret")
AS_ROOT = {"COMETMQ_ACCESS_KEY": ROOT.access_key, "COMETMQ_SECRET_KEY": ROOT.secret_key}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    with secured_standalone(tmp_path_factory.mktemp("secured")) as server:
        with blocking.AdminClient(server.namesrv, credentials=ADMIN) as admin:
            admin.create_topic(TOPIC, 1)
        yield server


def targets(server: StandaloneServer) -> list[str]:
    assert server.process is not None
    return [broker_address(server.process), server.namesrv]


def as_root(server: StandaloneServer, *args: str) -> subprocess.CompletedProcess[str]:
    result = cometmq(*args, "-n", server.namesrv, env=AS_ROOT)
    assert result.returncode == 0, result.stderr
    return result


def as_root_json(server: StandaloneServer, *args: str) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = json.loads(as_root(server, *args, "--json").stdout)
    assert [answer["target"] for answer in answers] == targets(server)
    assert all(answer["ok"] for answer in answers), answers
    return answers


def send_as(server: StandaloneServer, credentials: Credentials, body: bytes) -> None:
    with blocking.Producer("PID_cli_acl", server.namesrv, credentials=credentials, retry_times=0) as producer:
        producer.send(Message(TOPIC, body))


def test_a_user_and_its_acl_go_through_their_whole_life_with_the_cli(secured: StandaloneServer) -> None:
    created = as_root(secured, "user", "create", "-u", ALICE.access_key, "-p", ALICE.secret_key)
    broker, namesrv = targets(secured)
    # A standalone's name server and broker share one store: the user made at the broker is there.
    assert created.stdout.splitlines() == [
        f"{broker}: created user alice (Normal)",
        f"{namesrv}: created user alice (Normal) "
        "(through a server before it: they share their users and ACLs)",
    ]

    shown = as_root_json(secured, "user", "get", "-u", "alice")
    assert [answer["users"] for answer in shown] == [
        [{"username": "alice", "userType": "Normal", "userStatus": "enable"}]
    ] * 2  # never a password
    listed = as_root(secured, "user", "list").stdout
    assert "alice" in listed and "root" in listed and ALICE.secret_key not in listed

    # Without an ACL, alice may do nothing: not even look the topic's route up.
    with pytest.raises(BrokerError, match="user alice may not"):
        send_as(secured, ALICE, b"before the acl")

    as_root(secured, "acl", "create", "-s", "User:alice", "-r", f"Topic:{TOPIC}", "-a", "Pub,Sub")
    acls = as_root_json(secured, "acl", "get", "-s", "User:alice")
    for answer in acls:
        [acl] = answer["acls"]
        entries = [entry for policy in acl["policies"] for entry in policy["entries"]]
        assert [(e["resource"], sorted(e["actions"]), e["decision"]) for e in entries] == [
            (f"Topic:{TOPIC}", ["Pub", "Sub"], "Allow")
        ]
    send_as(secured, ALICE, b"allowed")

    as_root(secured, "acl", "update", "-s", "User:alice", "-r", f"Topic:{TOPIC}", "-a", "Sub")
    with pytest.raises(BrokerError, match=f"user alice may not Pub on Topic:{TOPIC}"):
        send_as(secured, ALICE, b"no more")
    listed_acls = as_root(secured, "acl", "list", "--subject-filter", "alice").stdout
    assert f"Topic:{TOPIC}" in listed_acls

    as_root(secured, "acl", "update", "-s", "User:alice", "-r", f"Topic:{TOPIC}", "-a", "Pub,Sub")
    as_root(secured, "user", "update", "-u", "alice", "--user-status", "disable")
    with pytest.raises(BrokerError, match="user alice is disabled"):
        send_as(secured, ALICE, b"disabled")

    as_root(secured, "acl", "delete", "-s", "User:alice")
    assert [answer["acls"] for answer in as_root_json(secured, "acl", "get", "-s", "User:alice")] == [[], []]
    as_root(secured, "user", "delete", "-u", "alice")
    with pytest.raises(BrokerError, match="user alice is not known here"):
        send_as(secured, ALICE, b"deleted")


def test_a_password_may_come_from_stdin(secured: StandaloneServer) -> None:
    command = [*COMMAND, "user", "create", "-u", "carol", "-p", "-", "-n", secured.namesrv]
    result = subprocess.run(
        command, input="carol-secret\n", capture_output=True, text=True, env={**subprocess_env(), **AS_ROOT}
    )
    assert result.returncode == 0, result.stderr
    as_root(secured, "acl", "create", "-s", "User:carol", "-r", f"Topic:{TOPIC}", "-a", "Pub")
    send_as(secured, Credentials("carol", "carol-secret"), b"from carol")


def test_the_commands_refused_say_so_once_per_server_and_fail(secured: StandaloneServer) -> None:
    unsigned = cometmq("user", "list", "-n", secured.namesrv)
    assert unsigned.returncode == 1
    # The name server lists no broker to an unsigned client: the refusal comes from it.
    assert "is not signed" in unsigned.stderr

    listed = cometmq("user", "list", "--addr", targets(secured)[0], "-n", secured.namesrv, env=AS_ROOT)
    assert listed.returncode == 0

    as_admin = {"COMETMQ_ACCESS_KEY": ADMIN.access_key, "COMETMQ_SECRET_KEY": "a wrong secret"}
    every_server = [option for addr in targets(secured) for option in ("--addr", addr)]
    wrong = cometmq("user", "list", *every_server, env=as_admin)
    assert wrong.returncode == 1
    refusals = [line for line in wrong.stdout.splitlines() if "does not match" in line]
    assert [line.split()[0] for line in refusals] == targets(secured)
    assert "2 of 2 servers did not do it" in wrong.stderr
    assert "a wrong secret" not in wrong.stdout + wrong.stderr


def test_servers_of_their_own_each_get_the_change(tmp_path: Path) -> None:
    with separate_secured_servers(tmp_path) as (namesrv, broker):
        created = cometmq("user", "create", "-u", "dave", "-p", "dave-secret", "-n", namesrv, env=AS_ROOT)
        assert created.returncode == 0, created.stderr
        assert created.stdout.splitlines() == [
            f"{broker}: created user dave (Normal)",
            f"{namesrv}: created user dave (Normal)",
        ]
        again = cometmq("user", "create", "-u", "dave", "-p", "dave-secret", "-n", namesrv, env=AS_ROOT)
        assert again.returncode == 1
        assert again.stdout.count("user dave exists already") == 2
        deleted = cometmq("user", "delete", "-u", "dave", "-n", namesrv, env=AS_ROOT)
        assert deleted.stdout.splitlines() == [
            f"{broker}: deleted user dave",
            f"{namesrv}: deleted user dave",
        ]
