"""The Spark connector's options for access control and TLS (accessKey, secretKey, tls, tlsCaFile,
tlsCertFile, tlsKeyFile): parsed on the driver, carried to the executors, never shown."""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path

import pytest
import trustme

from cometmq.auth import Credentials
from cometmq.client import MessageQueue
from cometmq.errors import OptionError
from cometmq.spark._options import ConnectOptions, ReadOptions, WriteOptions
from cometmq.spark._read import QueueRange


def test_without_the_options_clients_are_unsigned_and_plain() -> None:
    options = ReadOptions.parse({"topic": "T"})
    assert options.connect.client_options() == {"credentials": None, "tls": False}


def test_credentials_reach_the_read_and_the_write_side() -> None:
    given = {"topic": "T", "accessKey": "alice", "secretKey": "s3"}
    for options in (ReadOptions.parse(given), WriteOptions.parse(given)):
        assert options.connect.client_options()["credentials"] == Credentials("alice", "s3")


def test_a_key_without_its_secret_is_refused() -> None:
    with pytest.raises(OptionError, match="'accessKey' and 'secretKey' go together"):
        ReadOptions.parse({"topic": "T", "accessKey": "alice"})


def test_tls_true_uses_the_system_cas() -> None:
    assert ReadOptions.parse({"topic": "T", "tls": "true"}).connect.client_options()["tls"] is True


def test_tls_files_make_a_context_and_imply_tls(tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca_file))
    connect = ReadOptions.parse({"topic": "T", "tlsCaFile": str(ca_file)}).connect
    assert connect.tls
    assert isinstance(connect.client_options()["tls"], ssl.SSLContext)


def test_tls_false_wins_over_files(tmp_path: Path) -> None:
    connect = ReadOptions.parse({"topic": "T", "tls": "false", "tlsCaFile": str(tmp_path / "ca.pem")}).connect
    assert connect.client_options()["tls"] is False


def test_the_partition_carries_the_options_to_executors_and_hides_the_secret() -> None:
    connect = ConnectOptions.parse({"accesskey": "alice", "secretkey": "very-secret", "tls": "true"})
    part = QueueRange("127.0.0.1:9876", MessageQueue("T", "b", 0), 0, 10, "*", True, False, connect)
    copy = pickle.loads(pickle.dumps(part))
    assert copy.connect == connect
    assert "very-secret" not in repr(part)
