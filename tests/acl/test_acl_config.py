"""The access-control keys of broker.conf and of the name server's file: read, checked, and never
shown with their secrets; ``cometmq namesrv`` listening on this machine only unless told otherwise,
and every server saying so when it listens beyond it with access control off."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from cometmq.auth.serving import AclSettings, ServerAccess, is_loopback
from cometmq.broker import Broker, BrokerConfig
from cometmq.errors import ConfigError
from cometmq.namesrv import NameServer
from cometmq.namesrv.config import NamesrvConfig
from processes import ServerProcess
from secured_servers import INIT_USER, INNER, ROOT, write_conf


def _broker_config(tmp_path: Path, **keys: str) -> BrokerConfig:
    config = BrokerConfig()
    config.update({"storePathRootDir": str(tmp_path / "data"), "listenPort": "0", **keys})
    return config


def test_the_broker_reads_the_access_control_keys_and_hides_their_secrets(tmp_path: Path) -> None:
    config = _broker_config(
        tmp_path,
        aclEnable="true",
        plainAclFile="/etc/plain_acl.yml",
        initAuthenticationUser=INIT_USER,
        innerClientAuthenticationCredentials=INNER,
    )
    assert config.acl_enable
    assert config.plain_acl_file == "/etc/plain_acl.yml"
    assert config.inner_client_credentials == ROOT
    settings = config.acl_settings()
    assert settings.auth_config_path == tmp_path / "data" / "config"  # authConfigPath's default
    for shown in (repr(config), repr(settings), repr(config.inner_client_credentials)):
        assert ROOT.secret_key not in shown


def test_auth_config_path_moves_the_users_elsewhere(tmp_path: Path) -> None:
    config = _broker_config(tmp_path, authConfigPath=str(tmp_path / "auth"))
    assert config.acl_settings().auth_config_path == tmp_path / "auth"


def test_a_broker_with_acl_needs_credentials_of_its_own(tmp_path: Path) -> None:
    config = _broker_config(tmp_path, aclEnable="true", initAuthenticationUser=INIT_USER)
    with pytest.raises(ConfigError, match="innerClientAuthenticationCredentials"):
        Broker(config)


def test_acl_with_no_user_that_could_ever_sign_is_refused(tmp_path: Path) -> None:
    config = _broker_config(tmp_path, aclEnable="true", innerClientAuthenticationCredentials=INNER)
    with pytest.raises(ConfigError, match="no user could ever be authenticated"):
        Broker(config)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("innerClientAuthenticationCredentials", '{"accessKey": "a", "secretKey": 5ecret-not-json'),
        ("innerClientAuthenticationCredentials", '{"secretKey": "5ecret-without-key"}'),
        ("initAuthenticationUser", '{"password": "5ecret-without-name"}'),
        ("initAuthenticationUser", "5ecret-not-json"),
    ],
)
def test_malformed_credentials_name_the_key_and_never_the_secret(
    tmp_path: Path, key: str, value: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        config = _broker_config(tmp_path, **{key: value})
        ServerAccess(config.acl_settings(), "c")
    assert key in str(raised.value)
    assert "5ecret" not in str(raised.value)


def test_the_init_user_is_made_a_super_user_once(tmp_path: Path) -> None:
    settings = AclSettings(enabled=True, auth_config_path=tmp_path, init_authentication_user=INIT_USER)
    ServerAccess(settings, None)
    stored = ServerAccess(settings, None).store.list_users(None)
    assert [(user.username, user.user_type.value) for user in stored] == [("root", "Super")]


def test_the_name_server_reads_its_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = write_conf(
        tmp_path / "namesrv.conf",
        listenPort="9999",
        aclEnable="true",
        plainAclFile="/etc/plain_acl.yml",
        authConfigPath=str(tmp_path / "auth"),
        initAuthenticationUser=INIT_USER,
        innerClientAuthenticationCredentials=INNER,  # a broker's key, ignored without a word
        aclEnabel="true",
    )
    with caplog.at_level(logging.WARNING):
        config = NamesrvConfig.from_file(conf)
    assert config.listen_port == 9999 and config.acl_enable
    settings = config.acl_settings()
    assert settings.auth_config_path == tmp_path / "auth"
    assert settings.plain_acl_file == "/etc/plain_acl.yml"
    assert ROOT.secret_key not in repr(config)
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "aclEnabel" in warnings[0] and "aclEnable" in warnings[0], warnings


def test_loopback_addresses() -> None:
    assert all(is_loopback(host) for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(host) for host in ("0.0.0.0", "::", "", "10.1.2.3", "example.com"))


@pytest.mark.parametrize("acl", [False, True])
def test_a_server_listening_beyond_this_machine_without_acl_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, acl: bool
) -> None:
    settings = AclSettings(enabled=acl, auth_config_path=tmp_path, init_authentication_user=INIT_USER)

    async def scenario() -> None:
        for host in ("127.0.0.1", "0.0.0.0"):
            namesrv = NameServer(host, 0, access=ServerAccess(settings, None))
            await namesrv.start()
            await namesrv.stop()

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    warnings = [r.getMessage() for r in caplog.records if "aclEnable=false" in r.getMessage()]
    if acl:
        assert warnings == []
    else:
        assert len(warnings) == 1 and "0.0.0.0" in warnings[0], warnings


def test_cometmq_namesrv_listens_on_this_machine_only_by_default(tmp_path: Path) -> None:
    server = ServerProcess(
        ["namesrv", "--port", "0", "--data-dir", str(tmp_path / "auth")], tmp_path / "ns.log"
    )
    try:
        line = server.wait_ready("CometMQ namesrv ready:")
    finally:
        server.terminate()
    assert "listening on 127.0.0.1:" in line
    assert "aclEnable=false" not in server.log()
