"""ProxyServer: the gRPC server of the proxy, in the running event loop."""

from __future__ import annotations

import errno
import logging
import os
import socket
import time

import grpc

from cometmq.client.instance import ClientInstance
from cometmq.errors import ConfigError
from cometmq.proxy._config import ProxyConfig
from cometmq.proxy._context import ProxyContext
from cometmq.proxy._convert import MAX_BODY_SIZE
from cometmq.proxy._decoding import add_service
from cometmq.proxy._service import MessagingService
from cometmq.remoting.tls import ClientAuth, TlsMode, TlsSettings

log = logging.getLogger("cometmq.proxy")

# The largest request the proxy reads: twice the largest body a broker takes (maxMessageSize, 4 MiB), so
# that a body somewhat over it is answered MESSAGE_BODY_TOO_LARGE, as the clients expect, while a request
# far over it is cut off by gRPC (RESOURCE_EXHAUSTED) before the proxy holds it. RocketMQ's proxy reads up
# to 130 MiB (grpcMaxInboundMessageSize).
MAX_INBOUND_MESSAGE_BYTES = 2 * MAX_BODY_SIZE
# The server pings a connection quiet for this long, and closes it when the ping is not answered in the
# timeout: a client gone without a word (its host down) holds no stream open for ever.
KEEPALIVE_MS = 60_000
KEEPALIVE_TIMEOUT_MS = 20_000
# How often a client may ping, with or without calls in progress (the Java client: every 5 minutes,
# without calls too); gRPC's default refuses pings without calls and closes such a connection.
CLIENT_PING_INTERVAL_MS = 30_000
# How long stop() lets calls in progress (a long-polling receive) finish before cancelling them.
STOP_GRACE_S = 1.0


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise ConfigError(f"cannot read {key}={path} for the proxy's TLS: {exc.strerror or exc}") from None


def server_credentials(tls: TlsSettings) -> grpc.ServerCredentials | None:
    """The gRPC credentials of a proxy serving TLS under a broker's ``tls.server.*`` settings; None when
    their mode is disabled. gRPC cannot tell TLS from plaintext on one port: permissive serves TLS as
    enforcing does. ``tls.server.need.client.auth`` asks clients for a certificate signed by
    ``tls.server.trustCertPath`` (require: refuses one without)."""
    if tls.mode is TlsMode.DISABLED:
        return None
    if tls.server_key_password:
        raise ConfigError(
            "the proxy cannot read an encrypted key (tls.server.keyPassword): give it a plain one"
        )
    pair = (
        _read(tls.server_key_path, "tls.server.keyPath"),
        _read(tls.server_cert_path, "tls.server.certPath"),
    )
    if tls.need_client_auth is ClientAuth.NONE:
        return grpc.ssl_server_credentials([pair])
    return grpc.ssl_server_credentials(
        [pair],
        root_certificates=_read(tls.server_trust_cert_path, "tls.server.trustCertPath"),
        require_client_auth=tls.need_client_auth is ClientAuth.REQUIRE,
    )


def _bind_error(host: str, port: int, exc: RuntimeError) -> OSError | ConfigError:
    """What grpc's failure to bind *host*:*port* was: an address in use (an OSError, as a socket's
    bind raises it, for the CLI to name the flag), else a ConfigError carrying grpc's words."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as probed:
            if probed.errno == errno.EADDRINUSE:
                return OSError(errno.EADDRINUSE, f"{host}:{port} is in use")
    return ConfigError(f"the proxy cannot listen on {host}:{port}: {exc}")


class ProxyServer:
    """``apache.rocketmq.v2.MessagingService`` on ``config.host:config.port`` (0: a free port, which
    :attr:`port` and ``config.port`` say once started), in front of the brokers the name servers at
    ``config.namesrv_addr`` know."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self._brokers = ClientInstance(
            config.namesrv_addr,
            # Unique per process and start, as clients' ids must be; named so in the brokers' lists.
            instance_name=f"proxy#{os.getpid()}#{time.monotonic_ns()}",
            request_timeout=config.request_timeout_s,
            credentials=config.credentials,
            ssl_context=config.client_ssl_context,
        )
        self._context = ProxyContext.create(config, self._brokers)
        self._server: grpc.aio.Server | None = None
        self._service: MessagingService | None = None

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def address(self) -> str:
        return self.config.advertised_address

    async def start(self) -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_INBOUND_MESSAGE_BYTES),
                ("grpc.max_send_message_length", -1),
                # A connection with no call for as long as a client is kept idle is closed (RocketMQ
                # proxy's maxConnectionIdle of grpcClientIdleTimeMills).
                ("grpc.max_connection_idle_ms", int(self.config.client_idle_s * 1000)),
                ("grpc.keepalive_time_ms", KEEPALIVE_MS),
                ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", CLIENT_PING_INTERVAL_MS),
                ("grpc.max_concurrent_streams", self.config.max_concurrent_streams),
                # grpc shares a port with any other process asking so (SO_REUSEPORT); a second proxy on a
                # taken port must fail as every other server's port does.
                ("grpc.so_reuseport", 0),
            ],
        )
        service = self._service = MessagingService(self._context)
        add_service(service, server)
        listen = f"{self.config.host}:{self.config.port}"
        credentials = server_credentials(self.config.server_tls)
        try:
            if credentials is not None:
                port = server.add_secure_port(listen, credentials)
            else:
                port = server.add_insecure_port(listen)
        except RuntimeError as exc:  # grpc's one error for any address it cannot bind
            raise _bind_error(self.config.host, self.config.port, exc) from None
        self.config.port = port
        await server.start()
        self._server = server
        self._brokers.start()
        self._context.clients.start()
        log.info("proxy serving gRPC on %s, name servers %s", self.address, self.config.namesrv_addr)

    async def stop(self) -> None:
        await self._context.clients.stop()
        if self._server is not None:
            await self._server.stop(STOP_GRACE_S)
            self._server = None
        if self._service is not None:
            await self._service.close()
            self._service = None
        await self._brokers.close()
