"""ProxyServer: the gRPC server of the proxy, in the running event loop."""

from __future__ import annotations

import logging

import grpc

from cometmq.client.instance import ClientInstance
from cometmq.proxy._config import ProxyConfig
from cometmq.proxy._context import ProxyContext
from cometmq.proxy._pb import service_pb2_grpc
from cometmq.proxy._service import MessagingService

log = logging.getLogger("cometmq.proxy")

# How long stop() lets calls in progress (a long-polling receive) finish before cancelling them.
STOP_GRACE_S = 1.0


class ProxyServer:
    """``apache.rocketmq.v2.MessagingService`` on ``config.host:config.port`` (0: a free port, which
    :attr:`port` and ``config.port`` say once started), in front of the brokers the name servers at
    ``config.namesrv_addr`` know."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self._brokers = ClientInstance(
            config.namesrv_addr,
            instance_name=f"proxy-{config.host}-{config.port}",
            request_timeout=config.request_timeout_s,
            credentials=config.credentials,
            ssl_context=config.client_ssl_context,
        )
        self._context = ProxyContext.create(config, self._brokers)
        self._server: grpc.aio.Server | None = None

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def address(self) -> str:
        return self.config.advertised_address

    async def start(self) -> None:
        server = grpc.aio.server()
        service = MessagingService(self._context)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(service, server)  # type: ignore[no-untyped-call]
        listen = f"{self.config.host}:{self.config.port}"
        if self.config.server_certificate is not None:
            credentials = grpc.ssl_server_credentials([self.config.server_certificate])
            port = server.add_secure_port(listen, credentials)
        else:
            port = server.add_insecure_port(listen)
        if port == 0:  # grpc reports a port it cannot bind as 0 rather than raising
            raise OSError(98, f"cannot listen on {listen}")
        self.config.port = port
        await server.start()
        self._server = server
        self._brokers.start()
        log.info("proxy serving gRPC on %s, name servers %s", self.address, self.config.namesrv_addr)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(STOP_GRACE_S)
            self._server = None
        await self._brokers.close()
