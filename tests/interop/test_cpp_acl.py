"""The official RocketMQ C++ client (its 4.x request signatures, ``set_session_credentials``) against a
standalone with aclEnable and plain_acl.yml accounts: with the right credentials it sends and
consumes; a wrong secret, an unknown user or a user without Pub on the topic sends nothing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cometmq.auth import Credentials
from cometmq.client import blocking
from processes import StandaloneServer, read_cpp_result
from secured_servers import ACL_TOPIC, ADMIN, READER, WRITER, secured_standalone

pytestmark = pytest.mark.interop

SCRIPT = Path(__file__).with_name("_cpp_scenarios.py")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    with secured_standalone(tmp_path_factory.mktemp("secured")) as server:
        yield server


def cpp(server: StandaloneServer, scenario: str, credentials: Credentials, *args: str) -> dict[str, Any]:
    command = [
        sys.executable,
        str(SCRIPT),
        scenario,
        "--namesrv",
        server.namesrv,
        "--topic",
        ACL_TOPIC,
        "--access-key",
        credentials.access_key,
        "--secret-key",
        credentials.secret_key,
        *args,
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    return read_cpp_result(proc.stdout, proc.returncode, proc.stderr)


def stored_messages(server: StandaloneServer) -> int:
    with blocking.AdminClient(server.namesrv, credentials=ADMIN) as admin:
        return sum(high - low for low, high in map(admin.offset_bounds, admin.readable_queues(ACL_TOPIC)))


def test_the_cpp_client_with_credentials_sends_and_consumes(secured: StandaloneServer) -> None:
    sent = cpp(secured, "produce", WRITER, "--count", "4", "--tags", "cpp", "--body-prefix", "cpp-acl-")
    assert sent["ok"], sent["errors"]
    assert [record["status"] for record in sent["sent"]] == ["OK"] * 4
    consumed = cpp(
        secured, "push-consume", READER, "--group", "GID_cpp_acl", "--expression", "cpp", "--expect", "4"
    )
    assert consumed["ok"], consumed["errors"]
    assert sorted(bytes.fromhex(m["body_hex"]) for m in consumed["messages"]) == [
        f"cpp-acl-{i}".encode() for i in range(4)
    ]


@pytest.mark.parametrize(
    "credentials",
    [
        Credentials(WRITER.access_key, "not-the-secret"),
        Credentials("nobody", "whatever"),
        READER,  # may subscribe, not publish
    ],
    ids=["wrong secret", "unknown user", "no Pub"],
)
def test_the_cpp_client_refused_sends_nothing(secured: StandaloneServer, credentials: Credentials) -> None:
    before = stored_messages(secured)
    result = cpp(
        secured, "produce", credentials, "--count", "2", "--send-timeout-ms", "2000", "--timeout", "20"
    )
    assert not result["ok"]
    assert result["sent"] == []
    assert result["errors"]
    assert stored_messages(secured) == before
