"""``cometmq standalone | namesrv | broker | proxy``: run the server roles until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import resource
import signal
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cometmq.auth.serving import ServerAccess
from cometmq.cli._connect import security
from cometmq.cli._logs import add_log_options, log_startup_summary, setup_server_logging
from cometmq.cli._loop import run_async
from cometmq.errors import ConfigError
from cometmq.javaprops import read_properties
from cometmq.metrics import MetricsExporterType
from cometmq.namesrv import NameServer
from cometmq.namesrv.config import NamesrvConfig
from cometmq.remoting import default_max_connections
from cometmq.remoting.tls import TlsMode

# The broker (and its store) is imported only by the commands that run one, so the admin commands
# start fast and work wherever the client does.
if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from cometmq.broker import Broker, BrokerConfig
    from cometmq.dashboard import Dashboard
    from cometmq.proxy import ProxyServer

log = logging.getLogger("cometmq.cli")

# BrokerRole's names, spelled here so that building the parser does not import the broker.
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
# cometmq.dashboard.DEFAULT_PORT (RocketMQ Dashboard's), spelled here so that building the parser does
# not import the web stack.
DEFAULT_DASHBOARD_PORT = 8082
# Where ``cometmq proxy`` keeps its users and ACLs unless authConfigPath says otherwise.
DEFAULT_PROXY_AUTH_DIR = Path.home() / ".cometmq" / "proxy"
# cometmq.proxy.DEFAULT_PROXY_PORT (RocketMQ proxy's), spelled here so that building the parser does not
# import grpc.
DEFAULT_PROXY_PORT = 8081
# The try-it-out mode has SQL92 filters, the message trace topic and metrics on (broker.conf keys); a
# config file may still turn them off.
STANDALONE_DEFAULTS: dict[str, object] = {
    "enablePropertyFilter": True,
    "traceTopicEnable": True,
    "metricsExporterType": "PROM",
}


def add_server_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    standalone = commands.add_parser(
        "standalone",
        help="run a NameServer and a broker in one process (the zero-config way)",
        description=(
            "Run a NameServer and one broker in one process, data under one directory. "
            "Stops cleanly (flushing and persisting everything) on Ctrl-C or SIGTERM."
        ),
    )
    standalone.add_argument(
        "-c", "--config", metavar="FILE", help="a RocketMQ broker.conf (flags override it)"
    )
    standalone.add_argument("--data-dir", metavar="DIR", help="data directory (default: ~/.cometmq/data)")
    standalone.add_argument(
        "--host",
        metavar="HOST",
        help="address to listen on and advertise to clients (default: brokerIP1 of the file, else 127.0.0.1)",
    )
    standalone.add_argument("--namesrv-port", type=int, default=9876, metavar="PORT", help="default: 9876")
    standalone.add_argument("--broker-port", type=int, metavar="PORT", help="default: listenPort, else 10911")
    _add_metrics_port(standalone, "default: metricsPromExporterPort, else 5557")
    standalone.add_argument(
        "--no-metrics", action="store_true", help="serve no metrics (metricsExporterType=DISABLE)"
    )
    _add_busy_poll(standalone)
    _add_dashboard_flags(standalone)
    standalone.add_argument(
        "--proxy-port",
        type=int,
        default=DEFAULT_PROXY_PORT,
        metavar="PORT",
        help="port of the RocketMQ 5 gRPC proxy, for the 5.x clients (TLS under the broker's tls.server.* "
        f"settings); 0: serve no proxy (default: {DEFAULT_PROXY_PORT})",
    )
    add_log_options(standalone)
    standalone.set_defaults(func=run_standalone)

    namesrv = commands.add_parser(
        "namesrv",
        help="run a NameServer",
        description="Run a NameServer: brokers register with it, clients ask it where topics live.",
    )
    namesrv.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="a properties file: listenPort, aclEnable, plainAclFile, authConfigPath, "
        "initAuthenticationUser, ... (flags override it)",
    )
    namesrv.add_argument(
        "--data-dir",
        metavar="DIR",
        help="where the users and ACLs are kept (authConfigPath; default: ~/.cometmq/namesrv)",
    )
    namesrv.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="HOST",
        help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0: every address)",
    )
    namesrv.add_argument("--port", type=int, metavar="PORT", help="default: listenPort, else 9876")
    namesrv.add_argument(
        "--broker-expiry",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="drop a broker that has not registered for this long (default: 120)",
    )
    namesrv.add_argument(
        "--channel-max-idle",
        type=float,
        metavar="SECONDS",
        help="close a connection that has read and written nothing for this long; 0: never "
        "(serverChannelMaxIdleTimeSeconds; default: 120)",
    )
    namesrv.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="close connections past this many at once (serverMaxConnections; default: 10000, or fewer "
        f"under a lower limit of open files: {default_max_connections()} here)",
    )
    _add_metrics_port(namesrv, "turns metrics on (metricsExporterType=PROM); default: off")
    add_log_options(namesrv)
    namesrv.set_defaults(func=run_namesrv)

    broker = commands.add_parser(
        "broker",
        help="run a broker that registers with a NameServer",
        description=(
            "Run one broker. It registers with the NameServer(s) at --namesrv-addr; several brokers "
            "with different broker names form a cluster. A master and its slaves share one broker "
            "name: the master (--role ASYNC_MASTER or SYNC_MASTER) is --broker-id 0, each slave "
            "(--role SLAVE) --broker-id 1 or more, and a slave copies its master's messages and "
            "metadata."
        ),
    )
    broker.add_argument(
        "-n",
        "--namesrv-addr",
        metavar="HOST:PORT",
        help="NameServer address(es), ;-separated (default: namesrvAddr of the file, else $COMETMQ_NAMESRV)",
    )
    broker.add_argument("-c", "--config", metavar="FILE", help="a RocketMQ broker.conf (flags override it)")
    broker.add_argument("--data-dir", metavar="DIR", help="data directory (default: ~/.cometmq/data)")
    broker.add_argument(
        "--host",
        metavar="HOST",
        help=(
            "address to listen on and advertise (default: brokerIP1 of the file, listening on its "
            "listenHost if it sets one; else 127.0.0.1)"
        ),
    )
    broker.add_argument(
        "--port", type=int, metavar="PORT", help="client port (default: listenPort, else 10911)"
    )
    broker.add_argument("--broker-name", metavar="NAME", help="default: brokerName, else broker-a")
    broker.add_argument("--cluster", metavar="NAME", help="default: brokerClusterName, else DefaultCluster")
    broker.add_argument(
        "--role",
        choices=BROKER_ROLES,
        help=(
            "brokerRole: ASYNC_MASTER answers a send once stored; SYNC_MASTER once a slave has it too; "
            "SLAVE copies the master of its broker name and serves reads (default: brokerRole, "
            "else ASYNC_MASTER)"
        ),
    )
    broker.add_argument(
        "--broker-id",
        type=int,
        metavar="N",
        help=(
            "brokerId: a master is 0 (whatever is given), a slave 1 or more; with --etcd, this broker's "
            "own id in its group, 1 or more and distinct (default: brokerId, else 0)"
        ),
    )
    broker.add_argument(
        "--etcd",
        metavar="HOST:PORT[,...]",
        help=(
            "etcdEndpoints: run in failover mode, the group's master elected through etcd at these "
            "endpoints; --role then only says how a master acknowledges (default: etcdEndpoints, else "
            "static roles)"
        ),
    )
    _add_metrics_port(broker, "turns metrics on (metricsExporterType=PROM); default: off")
    _add_busy_poll(broker)
    add_log_options(broker)
    broker.set_defaults(func=run_broker)
    _add_proxy_command(commands)


def _add_proxy_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    proxy = commands.add_parser(
        "proxy",
        help="run the RocketMQ 5 gRPC proxy in front of a cluster",
        description=(
            "Serve RocketMQ 5's gRPC protocol (apache.rocketmq.v2.MessagingService) to the 5.x clients "
            "(Java, Go, C#, C++, Rust, Node.js, Python), in front of the brokers the name servers at "
            "--namesrv know. Its own requests to the cluster are signed with --access-key and go over "
            "--tls as a client's do."
        ),
    )
    proxy.add_argument(
        "-n",
        "--namesrv",
        metavar="HOST:PORT[;...]",
        help="the cluster's name server(s) (default: $COMETMQ_NAMESRV)",
    )
    proxy.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="HOST",
        help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0: every address)",
    )
    proxy.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PROXY_PORT,
        metavar="PORT",
        help=f"gRPC port; 0: a free one (default: {DEFAULT_PROXY_PORT}, RocketMQ proxy's)",
    )
    proxy.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="a properties file: the broker's tls.server.* keys (a mode other than disabled serves TLS with "
        "tls.server.certPath and tls.server.keyPath), and the name server's access-control keys (aclEnable "
        "checks every client's signature and permissions against the users of plainAclFile and "
        f"authConfigPath, default {DEFAULT_PROXY_AUTH_DIR}; initAuthenticationUser)",
    )
    add_log_options(proxy)
    proxy.set_defaults(func=run_proxy)


def _add_metrics_port(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help=f"serve Prometheus metrics on http://HOST:PORT/metrics, 0: a free port ({default})",
    )


def _add_busy_poll(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--busy-poll-us",
        type=int,
        metavar="US",
        help=(
            "keep polling the sockets after each request instead of sleeping, for a window that grows "
            "while requests keep coming and closes when they stop, at most US µs; 0: never (default: "
            "busyPollMicros, else 1000)"
        ),
    )
    parser.add_argument(
        "--busy-poll-fixed",
        action="store_const",
        const=False,
        dest="busy_poll_adaptive",
        help="poll the whole --busy-poll-us window after every request (busyPollAdaptive=false)",
    )


def _add_dashboard_flags(standalone: argparse.ArgumentParser) -> None:
    standalone.add_argument(
        "--dashboard-port",
        type=int,
        default=DEFAULT_DASHBOARD_PORT,
        metavar="PORT",
        help=f"port of the web dashboard; 0: a free one (default: {DEFAULT_DASHBOARD_PORT})",
    )
    standalone.add_argument("--no-dashboard", action="store_true", help="serve no web dashboard")
    add_allowed_host_option(standalone)


def add_allowed_host_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a further name the dashboard may be called by in its address, as a browser sends it (Host "
        "header); repeatable. It answers only to the address it serves on (and to localhost, 127.0.0.1 "
        "and [::1] when that is a loopback one), so that no other site can reach it through its name",
    )


def _broker_config(args: argparse.Namespace, defaults: dict[str, object] | None = None) -> BrokerConfig:
    """*defaults* (broker.conf keys), then the file's settings, then every given flag on top."""
    from cometmq.broker.config import BrokerConfig

    if args.config:
        config = BrokerConfig.from_file(args.config, defaults)
    else:
        config = BrokerConfig()
        config.update(defaults or {})
    overrides: dict[str, object] = {}
    if args.data_dir:
        overrides["store_path_root_dir"] = args.data_dir
    if args.host:
        # Advertise the address we listen on: clients must be able to reach what they are told.
        overrides["broker_ip1"] = args.host
        overrides["listen_host"] = args.host
    for flag, attribute in (
        ("broker_port", "listen_port"),
        ("port", "listen_port"),
        ("broker_name", "broker_name"),
        ("cluster", "broker_cluster_name"),
        ("namesrv_addr", "namesrv_addr"),
        ("busy_poll_us", "busy_poll_micros"),
        ("busy_poll_adaptive", "busy_poll_adaptive"),
        ("role", "broker_role"),
        ("broker_id", "broker_id"),
        ("etcd", "etcd_endpoints"),
        ("metrics_port", "metrics_prom_exporter_port"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            overrides[attribute] = value
    if getattr(args, "metrics_port", None) is not None:
        overrides["metrics_exporter_type"] = "PROM"
    if getattr(args, "no_metrics", False):
        overrides["metrics_exporter_type"] = "DISABLE"
    config.update(overrides, source="the command line")
    config.store_path_root_dir = os.path.abspath(os.path.expanduser(config.store_path_root_dir))
    return config


def _new_broker(
    config: BrokerConfig,
    access: ServerAccess | None = None,
    metrics_registry: CollectorRegistry | None = None,
) -> Broker:
    from cometmq.broker import Broker

    return Broker(config, access=access, metrics_registry=metrics_registry)


def _metrics_urls(server: Broker | NameServer) -> dict[str, str]:
    """The server's metrics endpoint by name, if it serves one (for the summary and the ready line)."""
    endpoint = server.metrics_endpoint
    return {"metrics": endpoint.url} if endpoint is not None else {}


def _urls_part(urls: dict[str, str]) -> str:
    """The ready line's end naming the web addresses being served (metrics, dashboard)."""
    return "".join(f", {name} {url}" for name, url in urls.items())


class ShutdownSignal:
    """SIGINT (Ctrl-C) and SIGTERM, caught from before start-up so a signal during a long start
    (store recovery) still ends in a clean stop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._installed: list[signal.Signals] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._loop.add_signal_handler(sig, self._event.set)
                self._installed.append(sig)
            except (NotImplementedError, RuntimeError):  # no signal handlers on this platform/thread
                pass

    async def wait(self) -> None:
        await self._event.wait()
        log.info("shutting down")

    def __enter__(self) -> ShutdownSignal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig in self._installed:
            self._loop.remove_signal_handler(sig)


@contextlib.contextmanager
def naming_flag_if_taken(host: str, port: int, flag: str) -> Iterator[None]:
    """A port already taken (most often by a server started earlier) ends the command with one line
    naming the port and the ``flag`` that chooses another."""
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise ConfigError(
            f"{host}:{port} is already in use (is another CometMQ running?): stop it, or choose another "
            f"port with {flag}"
        ) from None


async def _start_flagged_dashboard(
    args: argparse.Namespace, namesrv_addr: str, host: str
) -> Dashboard | None:
    """The standalone's dashboard on ``host``, acting as the user of the global --access-key (None
    with --no-dashboard)."""
    if args.no_dashboard:
        return None
    from cometmq.cli._connect import security
    from cometmq.dashboard import start_dashboard

    with naming_flag_if_taken(
        host, args.dashboard_port, "--dashboard-port (or turn it off with --no-dashboard)"
    ):
        return await start_dashboard(
            namesrv_addr,
            host,
            args.dashboard_port,
            more_hosts=args.allowed_host,
            **security(args).client_options(),
        )


async def _start_proxy(
    args: argparse.Namespace, config: BrokerConfig, access: ServerAccess
) -> ProxyServer | None:
    """The standalone's RocketMQ 5 proxy (None with --proxy-port 0), serving TLS as the broker does."""
    if args.proxy_port == 0:
        return None
    from cometmq.proxy import ProxyConfig, ProxyServer

    # It reaches the broker as the broker reaches its name server: the inner credentials, its TLS.
    proxy = ProxyServer(
        ProxyConfig(
            namesrv_addr=config.namesrv_addr,
            host=config.broker_ip1,
            port=args.proxy_port,
            server_tls=config.tls,
            credentials=config.inner_client_credentials,
            client_ssl_context=config.tls.client_context(),
            access_control=access.access_control,
        )
    )
    with naming_flag_if_taken(config.broker_ip1, args.proxy_port, "--proxy-port (or turn it off with 0)"):
        await proxy.start()
    return proxy


def print_ready_line(line: str) -> None:
    # Scripts and tests wait for this exact line on stdout; flush so a pipe sees it at once.
    print(line, flush=True)


async def _standalone(args: argparse.Namespace) -> int:
    config = _broker_config(args, STANDALONE_DEFAULTS)
    host = config.broker_ip1
    config.listen_host = host
    if config.tls.mode is TlsMode.ENFORCING and not config.tls.client_enable:
        raise ConfigError(
            "tls.server.mode=enforcing needs tls.enable=true here (with tls.client.trustCertPath for a "
            "certificate no system CA signs): the broker registers with its name server over TLS"
        )
    # One set of users and ACLs, the broker's, guards both servers: a user made on one is known to both.
    access = ServerAccess(config.acl_settings(), config.broker_cluster_name)
    # One process, one metrics endpoint: the broker serves its own and the name server's metrics.
    registry = None
    if config.metrics_exporter_type is MetricsExporterType.PROM:
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry()
    with ShutdownSignal() as shutdown:
        namesrv = NameServer(
            host=host, port=args.namesrv_port, access=access, tls=config.tls, metrics_registry=registry
        )
        with naming_flag_if_taken(host, args.namesrv_port, "--namesrv-port"):
            await namesrv.start()
        try:
            config.namesrv_addr = f"{host}:{namesrv.port}"
            broker = _new_broker(config, access, registry)
            with naming_flag_if_taken(host, config.listen_port, "--broker-port"):
                await broker.start()
            dashboard: Dashboard | None = None
            proxy: ProxyServer | None = None
            try:
                proxy = await _start_proxy(args, config, access)
                dashboard = await _start_flagged_dashboard(args, config.namesrv_addr, host)
                urls = _metrics_urls(broker)
                if dashboard is not None:
                    urls["dashboard"] = dashboard.url
                log_startup_summary(namesrv=namesrv, broker=broker, urls=urls)
                proxy_part = f", proxy {proxy.address}" if proxy is not None else ""
                print_ready_line(
                    f"CometMQ standalone ready: namesrv {host}:{namesrv.port}, broker {config.broker_name} "
                    f"at {host}:{broker.port}{proxy_part}, data in {config.store_path_root_dir}"
                    + _urls_part(urls)
                )
                await shutdown.wait()
            finally:
                if dashboard is not None:
                    await dashboard.stop()
                if proxy is not None:
                    await proxy.stop()
                await broker.stop()  # after the proxy, so it can still unregister from the NameServer
        finally:
            await namesrv.stop()
    return 0


def _namesrv_config(args: argparse.Namespace) -> NamesrvConfig:
    """The file's settings (if any), then every given flag on top."""
    config = NamesrvConfig.from_file(args.config) if args.config else NamesrvConfig()
    overrides: dict[str, object] = {}
    for flag, attribute in (
        ("port", "listen_port"),
        ("channel_max_idle", "server_channel_max_idle_time_seconds"),
        ("max_connections", "server_max_connections"),
        ("data_dir", "auth_config_path"),
        ("metrics_port", "metrics_prom_exporter_port"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides[attribute] = value
    if args.metrics_port is not None:
        overrides["metrics_exporter_type"] = "PROM"
    config.update(overrides, source="the command line")
    return config


async def _namesrv(args: argparse.Namespace) -> int:
    config = _namesrv_config(args)
    metrics_on = config.metrics_exporter_type is MetricsExporterType.PROM
    with ShutdownSignal() as shutdown:
        namesrv = NameServer(
            host=args.host,
            port=config.listen_port,
            broker_expiry_s=args.broker_expiry,
            order_message_enable=config.order_message_enable,
            limits=config.server_limits(),
            access=ServerAccess(config.acl_settings(), None),
            tls=config.tls,
            metrics_port=config.metrics_prom_exporter_port if metrics_on else None,
            metrics_host=config.metrics_prom_exporter_host or None,
        )
        with naming_flag_if_taken(args.host, config.listen_port, "--port"):
            await namesrv.start()
        try:
            urls = _metrics_urls(namesrv)
            log_startup_summary(namesrv=namesrv, urls=urls)
            print_ready_line(
                f"CometMQ namesrv ready: listening on {args.host}:{namesrv.port}" + _urls_part(urls)
            )
            await shutdown.wait()
        finally:
            await namesrv.stop()
    return 0


async def _broker(args: argparse.Namespace) -> int:
    config = _broker_config(args)
    if not config.namesrv_addr:
        config.namesrv_addr = os.environ.get("COMETMQ_NAMESRV", "")
    if not config.namesrv_addr:
        raise ConfigError(
            "no NameServer address: give --namesrv-addr, namesrvAddr in the file, or $COMETMQ_NAMESRV"
        )
    with ShutdownSignal() as shutdown:
        broker = _new_broker(config)
        with naming_flag_if_taken(config.bind_host, config.listen_port, "--port"):
            await broker.start()
        try:
            urls = _metrics_urls(broker)
            log_startup_summary(broker=broker, urls=urls)
            print_ready_line(
                f"CometMQ broker ready: {config.broker_name} at {config.broker_ip1}:{broker.port} "
                f"(cluster {config.broker_cluster_name}), namesrv {config.namesrv_addr}, "
                f"data in {config.store_path_root_dir}" + _urls_part(urls)
            )
            await shutdown.wait()
        finally:
            await broker.stop()
    return 0


async def _proxy(args: argparse.Namespace) -> int:
    from cometmq.proxy import ProxyConfig, ProxyServer

    namesrv = args.namesrv or os.environ.get("COMETMQ_NAMESRV", "")
    if not namesrv:
        raise ConfigError("no NameServer address: give --namesrv or $COMETMQ_NAMESRV")
    # The file takes a name server's keys: TLS, and users and ACLs of the proxy's own (a plain_acl.yml
    # shared with the brokers, say), kept under its own directory unless authConfigPath says otherwise.
    settings = NamesrvConfig(auth_config_path=str(DEFAULT_PROXY_AUTH_DIR))
    if args.config:
        settings.update(read_properties(args.config), source=args.config)
    access = ServerAccess(settings.acl_settings(), None)
    options = security(args).client_options()
    client_tls = options["tls"]
    config = ProxyConfig(
        namesrv_addr=namesrv,
        host=args.host,
        port=args.port,
        credentials=options["credentials"],
        client_ssl_context=ssl.create_default_context() if client_tls is True else client_tls or None,
        server_tls=settings.tls,
        access_control=access.access_control,
    )
    with ShutdownSignal() as shutdown:
        await access.start()
        try:
            proxy = ProxyServer(config)
            with naming_flag_if_taken(args.host, args.port, "--port"):
                await proxy.start()
            try:
                scheme = "plaintext" if settings.tls.mode is TlsMode.DISABLED else "TLS"
                checked = ", clients' signatures checked" if config.access_control is not None else ""
                print_ready_line(
                    f"CometMQ proxy ready: gRPC at {proxy.address} ({scheme}{checked}), namesrv {namesrv}"
                )
                await shutdown.wait()
            finally:
                await proxy.stop()
        finally:
            await access.stop()
    return 0


def raise_open_files_limit() -> None:
    """Raise the soft limit of open files (RLIMIT_NOFILE) to the hard one: each consume queue in use
    and each connection holds descriptors, and the soft limit is often 1 024. Before any config is
    made, so the connection limit's default follows. With no hard limit, up to the kernel's
    per-process ceiling (fs.nr_open)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            return
    if soft != resource.RLIM_INFINITY and soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as exc:
        log.warning("cannot raise the limit of open files from %d to %d: %s", soft, target, exc)


def run_standalone(args: argparse.Namespace) -> int:
    setup_server_logging(args)
    raise_open_files_limit()
    return run_async(_standalone(args), fast_loop=True)


def run_namesrv(args: argparse.Namespace) -> int:
    setup_server_logging(args)
    raise_open_files_limit()
    return run_async(_namesrv(args), fast_loop=True)


def run_broker(args: argparse.Namespace) -> int:
    setup_server_logging(args)
    raise_open_files_limit()
    return run_async(_broker(args), fast_loop=True)


def run_proxy(args: argparse.Namespace) -> int:
    setup_server_logging(args)
    return run_async(_proxy(args), fast_loop=True)
