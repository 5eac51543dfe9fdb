"""The proxy's settings."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from cometmq.auth import Credentials
from cometmq.errors import ConfigError
from cometmq.remoting.tls import TlsMode, TlsSettings

# RocketMQ proxy's gRPC port (ProxyConfig.grpcServerPort).
DEFAULT_PROXY_PORT = 8081


@dataclass(slots=True)
class ProxyConfig:
    """``namesrv_addr`` is ``host:port`` (several joined by ``;``). ``server_ssl_context`` serves TLS
    (plaintext without it); ``credentials`` and ``client_ssl_context`` are how the proxy itself reaches
    the name servers and brokers."""

    namesrv_addr: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PROXY_PORT
    credentials: Credentials | None = None
    client_ssl_context: ssl.SSLContext | None = None
    server_certificate: tuple[bytes, bytes] | None = None  # (private key PEM, certificate chain PEM)
    request_timeout_s: float = 3.0

    @property
    def advertised_address(self) -> str:
        """Where clients reach the proxy (once started, with the port it took)."""
        return f"{self.host}:{self.port}"


def server_certificate(tls: TlsSettings) -> tuple[bytes, bytes] | None:
    """The (private key, certificate chain) PEM pair a proxy serves TLS with under a broker's TLS settings;
    None when its ``tls.server.mode`` is disabled. gRPC cannot tell TLS from plaintext on one port, so
    permissive serves TLS as enforcing does."""
    if tls.mode is TlsMode.DISABLED:
        return None
    if tls.server_key_password:
        raise ConfigError(
            "the proxy cannot read an encrypted key (tls.server.keyPassword): give it unencrypted"
        )
    try:
        with open(tls.server_key_path, "rb") as key, open(tls.server_cert_path, "rb") as cert:
            return key.read(), cert.read()
    except OSError as exc:
        raise ConfigError(f"cannot read the proxy's TLS certificate or key: {exc}") from None
