"""Servers with access control (aclEnable) and, if asked, TLS: ``cometmq namesrv`` and ``cometmq broker``
processes started from a properties file, and a ``cometmq standalone`` for the client-side tests of both
(tests/client, tests/interop, tests/cli, tests/spark).

The standalone's users: the 4.x accounts of a plain_acl.yml (``ADMIN``, which the broker also signs its
own requests with; ``WRITER``, who may publish and subscribe to ``ACL_TOPIC``; ``READER``, who may only
subscribe to it) and the Super user ``ROOT`` (initAuthenticationUser) for the user and ACL commands.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cometmq.auth import Credentials
from cometmq.client.blocking import AdminClient
from processes import TEST_BROKER_CONF, ServerProcess, StandaloneServer
from tls_support import Certificates

# The super user every test server is started with (initAuthenticationUser).
ROOT = Credentials("root", "root-secret")
INIT_USER = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})
# What a broker signs its own requests with: the super user, known to the name server too.
INNER = json.dumps({"accessKey": ROOT.access_key, "secretKey": ROOT.secret_key})

ADMIN = Credentials("rocketmq2", "12345678")
WRITER = Credentials("writer", "writer-secret")
READER = Credentials("reader", "reader-secret")
ACL_TOPIC = "AclTopic"

PLAIN_ACL = f"""\
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: "{ADMIN.secret_key}"
    admin: true
  - accessKey: {WRITER.access_key}
    secretKey: {WRITER.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {ACL_TOPIC}=PUB|SUB
  - accessKey: {READER.access_key}
    secretKey: {READER.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {ACL_TOPIC}=SUB
"""


def secured_conf(directory: Path, tls: Certificates | None = None) -> Path:
    """A broker.conf (standalone reads its name server's keys from it too) with aclEnable, the plain
    accounts above and ROOT; with *tls*, TLS only (enforcing), the broker's own connections too."""
    directory.mkdir(parents=True, exist_ok=True)
    plain = directory / "plain_acl.yml"
    plain.write_text(PLAIN_ACL)
    keys = {
        "aclEnable": "true",
        "plainAclFile": str(plain),
        "initAuthenticationUser": INIT_USER,
        "innerClientAuthenticationCredentials": json.dumps(
            {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key}
        ),
    }
    if tls is not None:
        keys |= tls.server_properties("enforcing") | tls.client_properties()
    conf = directory / "broker.conf"
    conf.write_text(TEST_BROKER_CONF + _properties(keys))
    return conf


@contextmanager
def secured_standalone(directory: Path, tls: Certificates | None = None) -> Iterator[StandaloneServer]:
    """The standalone, running, with ``ACL_TOPIC`` created."""
    server = StandaloneServer(directory / "data", "-c", str(secured_conf(directory / "conf", tls)))
    server.start()
    try:
        context = tls.client_context() if tls is not None else False
        with AdminClient(server.namesrv, credentials=ADMIN, tls=context) as admin:
            admin.create_topic(ACL_TOPIC, 2)
        yield server
    finally:
        server.stop()


@contextmanager
def separate_secured_servers(directory: Path) -> Iterator[tuple[str, str]]:
    """A ``cometmq namesrv`` and a ``cometmq broker``, each in its own process with aclEnable and its
    own users (ROOT in both; the broker signs as ROOT): the name server's and the broker's address."""
    namesrv, namesrv_addr = start_namesrv(
        directory / "namesrv", aclEnable="true", initAuthenticationUser=INIT_USER
    )
    try:
        broker, broker_addr = start_broker(
            directory / "broker",
            namesrv_addr,
            aclEnable="true",
            initAuthenticationUser=INIT_USER,
            innerClientAuthenticationCredentials=INNER,
        )
        try:
            yield namesrv_addr, broker_addr
        finally:
            broker.terminate()
    finally:
        namesrv.terminate()


def write_conf(path: Path, **keys: str) -> Path:
    """A properties file holding *keys*."""
    path.write_text(_properties(keys), encoding="utf-8")
    return path


def _properties(keys: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in keys.items())


def start_namesrv(directory: Path, **keys: str) -> tuple[ServerProcess, str]:
    """``cometmq namesrv -c FILE`` holding *keys* on a port the OS picks, users under *directory*/auth;
    the process and its address."""
    directory.mkdir(parents=True, exist_ok=True)
    conf = write_conf(directory / "namesrv.conf", **keys)
    args = ["namesrv", "-c", str(conf), "--port", "0", "--data-dir", str(directory / "auth")]
    return _started(
        ServerProcess(args, directory / "namesrv.log"), "CometMQ namesrv ready:", r"listening on (\S+)"
    )


def start_broker(directory: Path, namesrv: str, **keys: str) -> tuple[ServerProcess, str]:
    """``cometmq broker -c FILE`` holding *keys* (and small store files) on a port the OS picks, data in
    *directory*/data; the process and its address."""
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "broker.conf"
    conf.write_text(TEST_BROKER_CONF + _properties(keys), encoding="utf-8")
    args = ["broker", "-c", str(conf), "--data-dir", str(directory / "data"), "--host", "127.0.0.1"]
    args += ["--port", "0", "-n", namesrv]
    return _started(
        ServerProcess(args, directory / "broker.log"), "CometMQ broker ready:", r" at (\S+) \(cluster"
    )


def _started(server: ServerProcess, ready: str, address_pattern: str) -> tuple[ServerProcess, str]:
    """*server* once it logged its *ready* line, and the address that line gives; stopped if it fails."""
    try:
        line = server.wait_ready(ready)
        found = re.search(address_pattern, line)
        assert found is not None, line
    except BaseException:
        server.terminate()
        raise
    return server, found.group(1)
