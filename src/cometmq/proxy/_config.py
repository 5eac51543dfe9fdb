"""The proxy's settings."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from cometmq.auth import AccessControl, Credentials
from cometmq.remoting.tls import TlsSettings

# RocketMQ proxy's gRPC port (ProxyConfig.grpcServerPort).
DEFAULT_PROXY_PORT = 8081


@dataclass(slots=True)
class ProxyConfig:
    """``namesrv_addr`` is ``host:port`` (several joined by ``;``). ``server_tls`` holds a broker's
    ``tls.server.*`` settings, which the proxy serves TLS by (plaintext while their mode is disabled);
    ``credentials`` and ``client_ssl_context`` are how the proxy itself reaches the name servers and
    brokers. With ``access_control`` (a standalone's, while its ``aclEnable`` is on) every client's call
    must be signed by a user allowed what the call does."""

    namesrv_addr: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PROXY_PORT
    server_tls: TlsSettings = field(default_factory=TlsSettings)
    credentials: Credentials | None = None
    client_ssl_context: ssl.SSLContext | None = None
    access_control: AccessControl | None = None
    request_timeout_s: float = 3.0

    @property
    def advertised_address(self) -> str:
        """Where clients reach the proxy (once started, with the port it took)."""
        return f"{self.host}:{self.port}"
