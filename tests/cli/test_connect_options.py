"""The options every command that talks to servers takes for access control and TLS
(cometmq.cli._connect): flags before or after the command, environment variables in their place,
and the combinations refused before anything is sent."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme

from cometmq.auth import Credentials
from cometmq.cli import build_parser
from cometmq.cli._connect import security, security_environ
from cometmq.errors import OptionError


def parse(
    *argv: str, environ: dict[str, str] | None = None
) -> tuple[Credentials | None, bool | ssl.SSLContext]:
    options = security(build_parser().parse_args(list(argv)), environ or {}).client_options()
    return options["credentials"], options["tls"]


def test_no_option_and_no_variable_means_unsigned_plain_tcp() -> None:
    assert parse("topic", "list") == (None, False)


@pytest.mark.parametrize(
    "argv",
    [
        ("--access-key", "alice", "--secret-key", "s3", "topic", "list"),
        ("topic", "list", "--access-key", "alice", "--secret-key", "s3"),
        ("--access-key", "alice", "topic", "list", "--secret-key", "s3"),
    ],
)
def test_credentials_are_taken_before_or_after_the_command(argv: tuple[str, ...]) -> None:
    assert parse(*argv) == (Credentials("alice", "s3"), False)


def test_environment_variables_stand_in_for_the_flags() -> None:
    environ = {"COMETMQ_ACCESS_KEY": "bob", "COMETMQ_SECRET_KEY": "from-env", "COMETMQ_TLS": "true"}
    credentials, tls = parse("group", "list", environ=environ)
    assert credentials == Credentials("bob", "from-env")
    assert tls is True


def test_a_flag_wins_over_its_variable() -> None:
    environ = {"COMETMQ_ACCESS_KEY": "bob", "COMETMQ_SECRET_KEY": "from-env"}
    credentials, _ = parse("topic", "list", "--access-key", "alice", "--secret-key", "s3", environ=environ)
    assert credentials == Credentials("alice", "s3")


@pytest.mark.parametrize("value", ["0", "false", ""])
def test_cometmq_tls_other_than_1_or_true_leaves_tls_off(value: str) -> None:
    assert parse("topic", "list", environ={"COMETMQ_TLS": value}) == (None, False)


def test_an_access_key_without_its_secret_is_refused() -> None:
    with pytest.raises(OptionError, match="give --secret-key"):
        parse("topic", "list", "--access-key", "alice")
    with pytest.raises(OptionError, match="give --access-key"):
        parse("topic", "list", environ={"COMETMQ_SECRET_KEY": "s3"})


def test_a_ca_file_turns_tls_on_with_a_context_that_trusts_it(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    _, tls = parse("topic", "list", "--tls-ca", str(ca_file))
    assert isinstance(tls, ssl.SSLContext)
    assert tls.verify_mode == ssl.CERT_REQUIRED and tls.check_hostname
    assert any(cert["serialNumber"] for cert in tls.get_ca_certs())


def test_a_client_certificate_and_key_are_loaded(tmp_path: Path) -> None:
    ca = trustme.CA()
    client = ca.issue_cert("client@example")
    cert_file, key_file = tmp_path / "client.pem", tmp_path / "client.key"
    client.cert_chain_pems[0].write_to_path(str(cert_file))
    client.private_key_pem.write_to_path(str(key_file))
    environ = {"COMETMQ_TLS_CERT": str(cert_file), "COMETMQ_TLS_KEY": str(key_file)}
    _, tls = parse("topic", "list", environ=environ)
    assert isinstance(tls, ssl.SSLContext)


def test_tls_files_that_cannot_be_loaded_are_refused_naming_the_problem(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="cannot load the TLS files"):
        parse("topic", "list", "--tls-ca", str(tmp_path / "missing.pem"))
    with pytest.raises(OptionError, match="needs --tls-cert"):
        parse("topic", "list", "--tls-key", str(tmp_path / "client.key"))


def test_a_child_process_gets_the_options_as_variables_not_arguments() -> None:
    args = build_parser().parse_args(
        ["bench", "latency", "--access-key", "alice", "--secret-key", "s3", "--tls"]
    )
    assert security_environ(args) == {
        "COMETMQ_ACCESS_KEY": "alice",
        "COMETMQ_SECRET_KEY": "s3",
        "COMETMQ_TLS": "1",
    }


def test_help_recommends_the_variable_for_the_secret(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["topic", "list", "--help"])
    assert "$COMETMQ_SECRET_KEY" in " ".join(capsys.readouterr().out.split())


def test_the_spark_connector_gets_the_same_as_its_options(tmp_path: Path) -> None:
    args = build_parser().parse_args(["pipeline", "demo", "--access-key", "alice", "--tls-ca", "/ca.pem"])
    options = security(args, {"COMETMQ_SECRET_KEY": "s3"}).connector_options()
    assert options == {"accessKey": "alice", "secretKey": "s3", "tls": "true", "tlsCaFile": "/ca.pem"}
    assert "s3" not in repr(security(args, {"COMETMQ_SECRET_KEY": "s3"}))
