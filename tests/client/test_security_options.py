"""The ``credentials`` and ``tls`` options every client takes: what they accept, and that they reach
the connections (the loop's and the blocking lane's)."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from cometmq.auth import Credentials
from cometmq.client import AdminClient, LitePullConsumer, Producer, PushConsumer, load_tls_context
from cometmq.errors import OptionError

NAMESRV = "127.0.0.1:9876"


def make(kind: str, **options: Any) -> Any:
    if kind == "producer":
        return Producer("PID_security", NAMESRV, **options)
    if kind == "push":
        return PushConsumer("GID_security", NAMESRV, **options)
    if kind == "litepull":
        return LitePullConsumer("GID_security", NAMESRV, **options)
    return AdminClient(NAMESRV, **options)


KINDS = ["producer", "push", "litepull", "admin"]


@pytest.mark.parametrize("kind", KINDS)
def test_tls_must_be_a_bool_or_a_context(kind: str) -> None:
    with pytest.raises(OptionError, match=r"tls must be True, False or an ssl\.SSLContext"):
        make(kind, tls="yes")


@pytest.mark.parametrize("kind", KINDS)
def test_credentials_must_be_credentials(kind: str) -> None:
    with pytest.raises(OptionError, match=r"credentials must be a cometmq\.auth\.Credentials"):
        make(kind, credentials=("alice", "secret"))


def test_the_producer_hands_both_to_the_loop_and_to_its_blocking_lane() -> None:
    credentials = Credentials("alice", "secret")
    context = ssl.create_default_context()
    producer = Producer("PID_security", NAMESRV, credentials=credentials, tls=context)
    instance = producer._instance
    assert (instance.credentials, instance.ssl_context) == (credentials, context)
    assert (producer._lane._credentials, producer._lane._ssl_context) == (credentials, context)


def test_tls_true_is_a_default_context_checking_the_server() -> None:
    admin = AdminClient(NAMESRV, tls=True)
    context = admin._connections.ssl_context
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_no_option_means_plain_unsigned_connections() -> None:
    admin = AdminClient(NAMESRV)
    assert (admin._connections.credentials, admin._connections.ssl_context) == (None, None)


def test_a_client_repr_and_its_credentials_repr_never_show_the_secret() -> None:
    credentials = Credentials("alice", "very-secret-key")
    producer = Producer("PID_security", NAMESRV, credentials=credentials)
    assert "very-secret-key" not in repr(credentials)
    assert "very-secret-key" not in repr(producer)


def test_load_tls_context_names_the_file_it_cannot_read(tmp_path: Any) -> None:
    with pytest.raises(OptionError, match="cannot load the TLS files"):
        load_tls_context(str(tmp_path / "none.pem"))
