"""The tls.* keys in a broker.conf and a name server's file, and what a broker makes of bad ones."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cometmq.broker import Broker
from cometmq.broker.config import BrokerConfig
from cometmq.errors import ConfigError
from cometmq.namesrv.config import NamesrvConfig
from cometmq.remoting.tls import ClientAuth, TlsMode, TlsSettings
from secured_servers import write_conf
from tls_support import Certificates, make_certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def test_a_broker_conf_and_a_namesrv_conf_read_the_tls_keys(certs: Certificates, tmp_path: Path) -> None:
    settings = {**certs.server_properties("permissive", "optional"), **certs.client_properties()}
    conf = write_conf(tmp_path / "broker.conf", **{"brokerName": "b", **settings})
    expected = TlsSettings(
        mode=TlsMode.PERMISSIVE,
        server_cert_path=str(certs.server_cert),
        server_key_path=str(certs.server_key),
        need_client_auth=ClientAuth.OPTIONAL,
        server_trust_cert_path=str(certs.ca),
        client_enable=True,
        client_trust_cert_path=str(certs.ca),
    )
    assert BrokerConfig.from_file(conf).tls == expected
    assert NamesrvConfig.from_file(conf).tls == expected
    assert BrokerConfig().tls == NamesrvConfig().tls == TlsSettings()


def test_a_misspelt_tls_key_is_named_with_the_closest_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = write_conf(tmp_path / "broker.conf", **{"tls.server.mdoe": "enforcing"})
    with caplog.at_level(logging.WARNING, logger="cometmq.broker"):
        config = BrokerConfig.from_file(conf)
    assert config.tls.mode is TlsMode.DISABLED
    assert "unknown key tls.server.mdoe" in caplog.text and "did you mean tls.server.mode?" in caplog.text


def test_a_bad_tls_value_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    conf = write_conf(tmp_path / "broker.conf", **{"tls.server.need.client.auth": "always"})
    with pytest.raises(ConfigError, match=r"tls\.server\.need\.client\.auth='always' is not one of none"):
        BrokerConfig.from_file(conf)


def test_a_broker_whose_certificate_cannot_be_loaded_does_not_start(
    certs: Certificates, tmp_path: Path
) -> None:
    config = BrokerConfig()
    config.update(
        {
            **certs.server_properties("enforcing"),
            "tls.server.certPath": str(tmp_path / "missing.pem"),
            "storePathRootDir": str(tmp_path / "data"),
            "listenPort": "0",
            "listenHost": "127.0.0.1",
            "mappedFileSizeCommitLog": "4194304",
        }
    )
    with pytest.raises(ConfigError, match=r"cannot load the TLS certificate tls\.server\.certPath=.*missing"):
        Broker(config)


def test_a_client_trust_file_that_cannot_be_loaded_is_a_config_error(tmp_path: Path) -> None:
    config = BrokerConfig()
    config.update({"tls.enable": "true", "tls.client.trustCertPath": str(tmp_path / "none.pem")})
    with pytest.raises(ConfigError, match=r"cannot load the CA certificates tls\.client\.trustCertPath="):
        config.tls.client_context()
