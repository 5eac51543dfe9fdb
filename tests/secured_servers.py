"""A ``cometmq standalone`` with access control (aclEnable) and, if asked, TLS, for the client-side
tests of both (tests/client, tests/interop, tests/cli, tests/spark).

Its users: the 4.x accounts of a plain_acl.yml (``ADMIN``, which the broker also signs its own
requests with; ``WRITER``, who may publish and subscribe to ``ACL_TOPIC``; ``READER``, who may only
subscribe to it) and the Super user ``ROOT`` (initAuthenticationUser) for the user and ACL commands.
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import trustme

from cometmq.auth import Credentials
from cometmq.client.blocking import AdminClient
from processes import TEST_BROKER_CONF, ServerProcess, StandaloneServer

ADMIN = Credentials("rocketmq2", "12345678")
WRITER = Credentials("writer", "writer-secret")
READER = Credentials("reader", "reader-secret")
ROOT = Credentials("root", "root-secret")
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


@dataclass
class TlsFiles:
    """A test CA and the standalone's certificate for 127.0.0.1, as PEM files."""

    ca: trustme.CA
    ca_file: Path
    cert_file: Path
    key_file: Path

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context


def tls_files(directory: Path) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    files = TlsFiles(ca, directory / "ca.pem", directory / "server.pem", directory / "server.key")
    ca.cert_pem.write_to_path(str(files.ca_file))
    cert.cert_chain_pems[0].write_to_path(str(files.cert_file))
    cert.private_key_pem.write_to_path(str(files.key_file))
    return files


def secured_conf(directory: Path, tls: TlsFiles | None = None) -> Path:
    """A broker.conf (standalone reads its name server's keys from it too) with aclEnable, the plain
    accounts above and ROOT; with *tls*, TLS only (enforcing), the broker's own connections too."""
    directory.mkdir(parents=True, exist_ok=True)
    plain = directory / "plain_acl.yml"
    plain.write_text(PLAIN_ACL)
    lines = [
        "aclEnable=true",
        f"plainAclFile={plain}",
        "initAuthenticationUser=" + json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key}),
        "innerClientAuthenticationCredentials="
        + json.dumps({"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key}),
    ]
    if tls is not None:
        lines += [
            "tls.server.mode=enforcing",
            f"tls.server.certPath={tls.cert_file}",
            f"tls.server.keyPath={tls.key_file}",
            "tls.enable=true",
            f"tls.client.trustCertPath={tls.ca_file}",
        ]
    conf = directory / "broker.conf"
    conf.write_text(TEST_BROKER_CONF + "\n".join(lines) + "\n")
    return conf


@contextmanager
def secured_standalone(directory: Path, tls: TlsFiles | None = None) -> Iterator[StandaloneServer]:
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
    directory.mkdir(parents=True, exist_ok=True)
    keys = {
        "aclEnable": "true",
        "initAuthenticationUser": json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key}),
    }
    namesrv_conf = directory / "namesrv.conf"
    namesrv_conf.write_text("".join(f"{key}={value}\n" for key, value in keys.items()))
    keys["innerClientAuthenticationCredentials"] = json.dumps(
        {"accessKey": ROOT.access_key, "secretKey": ROOT.secret_key}
    )
    broker_conf = directory / "broker.conf"
    broker_conf.write_text(TEST_BROKER_CONF + "".join(f"{key}={value}\n" for key, value in keys.items()))
    namesrv = ServerProcess(
        ["namesrv", "-c", str(namesrv_conf), "--port", "0", "--data-dir", str(directory / "namesrv")],
        directory / "namesrv.log",
    )
    broker: ServerProcess | None = None
    try:
        namesrv_addr = _address(namesrv.wait_ready("CometMQ namesrv ready:"), r"listening on (\S+)")
        broker_args = ["broker", "-c", str(broker_conf), "--data-dir", str(directory / "broker")]
        broker = ServerProcess(
            [*broker_args, "--host", "127.0.0.1", "--port", "0", "-n", namesrv_addr], directory / "broker.log"
        )
        broker_addr = _address(broker.wait_ready("CometMQ broker ready:"), r" at (\S+) \(cluster")
        yield namesrv_addr, broker_addr
    finally:
        if broker is not None:
            broker.terminate()
        namesrv.terminate()


def _address(ready_line: str, pattern: str) -> str:
    found = re.search(pattern, ready_line)
    assert found is not None, ready_line
    return found.group(1)
