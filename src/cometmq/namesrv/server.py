"""The NameServer: a RemotingServer with one table of request code → processor method (route, admin and
KV requests), plus the expiry scan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from cometmq.auth import AccessControl
from cometmq.auth.serving import ServerAccess, warn_if_open
from cometmq.namesrv.kv_config import KVConfigManager
from cometmq.namesrv.processors import (
    BrokerRegistrationProcessor,
    KVConfigProcessor,
    RouteQueryProcessor,
    TopicAdminProcessor,
)
from cometmq.namesrv.route_info import RouteInfoManager
from cometmq.protocol import RequestCode
from cometmq.remoting import Connection, Dispatcher, RemotingServer, RequestHandler, ServerLimits
from cometmq.remoting.tls import TlsMode, TlsSettings

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from cometmq.metrics import MetricsEndpoint, NamesrvMetrics

log = logging.getLogger("cometmq.namesrv")


class NameServer:
    """Serves routes on ``host:port`` (port 0 picks a free one; :attr:`port` is the bound one).

    Brokers register every 30 s; one silent for ``broker_expiry_s`` is dropped by a scan that runs
    every ``scan_interval_s`` (RocketMQ: 120 s and 10 s; tests shrink both). Until then, its broker
    name and id can be neither taken nor unregistered by a request naming another address.

    ``limits`` bound what clients may make it hold (idle time, connections, partial frames).
    ``access`` serves the users and ACLs requests and, with aclEnable, checks every request (none:
    neither). ``tls`` gives the ``tls.server.*`` settings (none: TLS off).

    Metrics (docs/metrics.md): with ``metrics_port`` the name server serves them on
    ``metrics_host`` (None: *host*) : ``metrics_port``; with ``metrics_registry`` it adds them to that
    registry (``cometmq standalone``: the broker serves it), and serves that one if it has a port.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9876,
        broker_expiry_s: float = 120.0,
        scan_interval_s: float = 10.0,
        *,
        order_message_enable: bool = False,
        clock: Callable[[], float] = time.monotonic,
        limits: ServerLimits | None = None,
        access: ServerAccess | None = None,
        tls: TlsSettings | None = None,
        metrics_port: int | None = None,
        metrics_host: str | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        self.scan_interval_s = scan_interval_s
        self._clock = clock
        self.routes = RouteInfoManager(broker_expiry_s=broker_expiry_s)
        self.kv_config = KVConfigManager()
        registration = BrokerRegistrationProcessor(self.routes, self.kv_config, clock)
        queries = RouteQueryProcessor(self.routes, self.kv_config, order_message_enable)
        topic_admin = TopicAdminProcessor(self.routes)
        kv = KVConfigProcessor(self.kv_config)
        table: dict[int, RequestHandler] = {
            RequestCode.REGISTER_BROKER: registration.register_broker,
            RequestCode.UNREGISTER_BROKER: registration.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: registration.query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: queries.route_of_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: queries.cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: queries.all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: queries.topics_of_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: queries.system_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: topic_admin.delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: topic_admin.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: topic_admin.add_write_perm,
            RequestCode.PUT_KV_CONFIG: kv.put,
            RequestCode.GET_KV_CONFIG: kv.get,
            RequestCode.DELETE_KV_CONFIG: kv.delete,
            RequestCode.GET_KVLIST_BY_NAMESPACE: kv.list_namespace,
        }
        self.access = access
        if access is not None:
            table.update(access.admin_handlers())
        self.dispatcher = Dispatcher(table, gate=access.gate() if access is not None else None)
        self.metrics: NamesrvMetrics | None = None
        self._metrics_port = metrics_port
        self._metrics_host = metrics_host
        self._metrics_registry = metrics_registry
        self.metrics_endpoint: MetricsEndpoint | None = None
        if metrics_port is not None or metrics_registry is not None:
            from cometmq.metrics import NamesrvMetrics

            self.metrics = NamesrvMetrics(self)
        self._server = RemotingServer(
            self.dispatcher,
            host,
            port,
            limits=limits,
            tls=tls,
            observer=self.metrics.rpc_latency if self.metrics is not None else None,
        )
        self._tls_mode = tls.mode if tls is not None else TlsMode.DISABLED
        # A broker whose connection closes is dropped at once, not after the expiry time.
        self._server.add_close_listener(self.routes.connection_closed)
        self._scan_task: asyncio.Task[None] | None = None

    @property
    def access_control(self) -> AccessControl | None:
        """What checks every request before its handler (None while aclEnable is off)."""
        return self.access.access_control if self.access is not None else None

    @property
    def tls_mode(self) -> TlsMode:
        """``tls.server.mode``: whether clients may, or must, connect over TLS."""
        return self._tls_mode

    @property
    def host(self) -> str:
        return self._server.host

    @property
    def port(self) -> int:
        return self._server.port

    async def start(self) -> None:
        if self.access is not None:
            await self.access.start()
        try:
            await self._server.start()
            if self.metrics is not None:
                await self._start_metrics(self.metrics)
        except BaseException:
            await self._server.stop()
            if self.access is not None:
                await self.access.stop()
            raise
        warn_if_open("name server", self.host, self.port, self.access_control is not None, self._tls_mode)
        self._scan_task = asyncio.create_task(self._scan_forever(), name="namesrv-broker-expiry")
        log.info("name server listening on %s:%d", self.host, self.port)

    async def _start_metrics(self, metrics: NamesrvMetrics) -> None:
        from prometheus_client import CollectorRegistry

        from cometmq.metrics import start_metrics_endpoint

        registry = self._metrics_registry if self._metrics_registry is not None else CollectorRegistry()
        registry.register(metrics)
        if self._metrics_port is not None:
            host = self._metrics_host or self.host
            self.metrics_endpoint = await start_metrics_endpoint(registry, host, self._metrics_port)
            log.info("name server serves its metrics on %s", self.metrics_endpoint.url)

    async def stop(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
            self._scan_task = None
        await self._server.stop()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
            self.metrics_endpoint = None
        if self.access is not None:
            await self.access.stop()
        log.info("name server stopped")

    def scan_not_active_brokers(self) -> None:
        for connection in self.routes.scan_not_active(self._clock()):
            # Like RocketMQ, close the dead broker's connection; it re-registers when it is back.
            if isinstance(connection, Connection):
                connection.close()

    async def _scan_forever(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            try:
                self.scan_not_active_brokers()
            except Exception:
                log.exception("broker expiry scan failed")
