"""``cometmq cluster up``: a NameServer and master/slave broker groups on one machine, each server in a
process of its own, started with one command and stopped together on Ctrl-C or SIGTERM; with
``--etcd``, an etcd too, and brokers whose masters are elected through it (failover mode)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import string
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cometmq.cli._admin import whole_number
from cometmq.cli._logs import LOG_LEVELS, add_log_file_options, setup_logging
from cometmq.cli._loop import run_async
from cometmq.cli._servers import ShutdownSignal
from cometmq.console import format_table
from cometmq.errors import CometMQError, ConfigError
from cometmq.javaprops import read_properties
from cometmq.remoting.tls import TLS_KEYS

log = logging.getLogger("cometmq.cli")

DEFAULT_DATA_DIR = "~/.cometmq/cluster"
MASTER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")
MAX_GROUPS = len(string.ascii_lowercase)  # broker-a … broker-z
LOG_TAIL_LINES = 20
# Debian's etcd-server package puts it here; PATH is searched first.
ETCD_BINARY = "/usr/bin/etcd"
DEFAULT_ETCD_PORT = 2379  # etcd's own default client port; its peer port is the one after it
ETCD_HEALTH_INTERVAL_S = 0.1

# What each server prints on stdout once it serves; the address is read from it, so ports the OS
# picks (port 0) are known too.
_NAMESRV_READY = re.compile(r"^CometMQ namesrv ready: listening on ([^\s,]+)")
_BROKER_READY = re.compile(r"^CometMQ broker ready: \S+ at (\S+) ")
_PROXY_READY = re.compile(r"^CometMQ proxy ready: gRPC at (\S+) ")
_METRICS_URL = re.compile(r", metrics (\S+)")


def add_cluster_up_command(cluster_commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = cluster_commands.add_parser(
        "up",
        help="run a NameServer and master/slave broker groups on this machine, until Ctrl-C",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run a replicated cluster on this machine: one NameServer and --groups broker groups\n"
            "(broker-a, broker-b, …), each a master (brokerId 0, --role) and --slaves slaves (brokerId\n"
            "1, 2, …, brokerRole SLAVE). Every server is a process of its own ('cometmq namesrv',\n"
            "'cometmq broker -c DIR/broker.conf') with a directory of its own under --data-dir:\n"
            "\n"
            "  DIR/namesrv/namesrv.conf (the access-control and tls.* keys of -c), namesrv.log, namesrv.out\n"
            "  DIR/broker-a-0/broker.conf, broker.log, broker.out and the broker's store (commitlog/, …)\n"
            "\n"
            "Each server logs to its .log file, rotated as --log-max-size and --log-backups say; its\n"
            ".out file keeps what it printed since its last start: its ready line, its warnings and errors,\n"
            "a crash's report.\n"
            "\n"
            "broker.conf is written at every start (the file given with -c first, then the keys this\n"
            "command sets); a data directory used before keeps its messages. Ports: the NameServer on\n"
            "--namesrv-port; group i's master on --base-port + 10·i (20·i from 5 slaves on), its\n"
            "slaves 2, 4, … above it, so the port after each broker's (its HA port, haListenPort)\n"
            "stays free; port 0 lets the OS pick every port. A table says what runs where, then one\n"
            "line starting 'CometMQ cluster ready:'.\n"
            "\n"
            "Ctrl-C or SIGTERM stops the slaves, then the masters, then the NameServer, each cleanly;\n"
            "a server that has not stopped after --stop-timeout seconds is killed, and said so. A server\n"
            "that fails to start stops the whole command with the end of its log and status 1. A server\n"
            "that exits while the cluster runs is reported and not restarted (stop a master to watch\n"
            "its slave serve reads); the exit status is 0 only when every server stopped cleanly.\n"
            "\n"
            "--etcd runs the groups in failover mode: an etcd (Debian's etcd-server) on --etcd-port and\n"
            "the port after it, data in DIR/etcd/, and in each group 1 + --slaves brokers with brokerId\n"
            "1, 2, … and etcdEndpoints set, all equal: etcd elects each group's master (--role says\n"
            "how it acknowledges), and elects another when it dies. etcd stops last.\n"
            "\n"
            "--proxy-port runs the RocketMQ 5 gRPC proxy too ('cometmq proxy', DIR/proxy/), in front of\n"
            "the brokers, for the 5.x clients: started last, stopped first."
        ),
    )
    up.add_argument(
        "--groups",
        type=whole_number(1, MAX_GROUPS),
        default=2,
        metavar="N",
        help="broker groups (masters), named broker-a, broker-b, … (default: 2)",
    )
    up.add_argument(
        "--slaves", type=whole_number(0), default=1, metavar="N", help="slaves per master (default: 1)"
    )
    up.add_argument(
        "--role",
        choices=MASTER_ROLES,
        default="ASYNC_MASTER",
        type=str.upper,
        help="the masters' brokerRole: SYNC_MASTER answers a send once a slave has it too "
        "(default: ASYNC_MASTER)",
    )
    up.add_argument(
        "--etcd",
        action="store_true",
        help="failover mode: start an etcd and let it elect each group's master (see above)",
    )
    up.add_argument(
        "--etcd-port",
        type=whole_number(0, 65534),
        default=DEFAULT_ETCD_PORT,
        metavar="PORT",
        help=f"etcd's client port with --etcd, its peer port the next (default: {DEFAULT_ETCD_PORT}); "
        "0: two free ports",
    )
    up.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help=f"one directory per server under it (default: {DEFAULT_DATA_DIR})",
    )
    up.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="HOST",
        help="address every server listens on and advertises to clients (default: 127.0.0.1)",
    )
    up.add_argument(
        "--namesrv-port", type=whole_number(0, 65535), default=9876, metavar="PORT", help="default: 9876"
    )
    up.add_argument(
        "--base-port",
        type=whole_number(0, 65535),
        default=10911,
        metavar="PORT",
        help="the first master's listenPort (default: 10911); 0: every broker's port picked by the OS",
    )
    up.add_argument(
        "--cluster",
        default="DefaultCluster",
        metavar="NAME",
        help="brokerClusterName (default: DefaultCluster)",
    )
    up.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="a broker.conf every broker starts from (e.g. flushDiskType, mappedFileSizeCommitLog); "
        "the keys this command sets win",
    )
    up.add_argument(
        "--start-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="a server not ready after this long has failed to start (default: 120)",
    )
    up.add_argument(
        "--metrics-port",
        type=whole_number(0, 65535),
        metavar="BASE",
        help="serve every server's Prometheus metrics: the NameServer's on BASE, the n-th broker's on "
        "BASE + n, as the table lists them; 0: free ports (default: no metrics)",
    )
    up.add_argument(
        "--proxy-port",
        type=whole_number(0, 65535),
        metavar="PORT",
        help="run the RocketMQ 5 gRPC proxy on PORT too (RocketMQ's: 8081); 0: a free port "
        "(default: no proxy)",
    )
    up.add_argument(
        "--stop-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a server not stopped this long after SIGTERM is killed (default: 30)",
    )
    up.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=LOG_LEVELS,
        help="the servers' log level (their logs go to files in their directories; default: INFO)",
    )
    add_log_file_options(up)
    up.set_defaults(func=run_cluster_up)


@dataclass
class Server:
    """One server of the cluster and its process."""

    label: str  # "namesrv", "etcd", "broker-a-0", "proxy": the name of its directory too
    role: str  # "namesrv", "etcd", "proxy", a master role or "SLAVE" (failover mode: every broker a master
    # role)
    directory: Path
    port: int  # as configured; 0: the OS picks it
    broker_name: str = ""
    broker_id: int = 0
    process: asyncio.subprocess.Process | None = None
    address: str = ""  # host:port, from the ready line
    out_start: int = 0  # etcd's log file's size before this run: what it printed starts there
    metrics_port: int | None = None  # None: no metrics; 0: a port the OS picks
    metrics_url: str = ""  # from the ready line
    namesrv: str = ""  # the proxy's: the NameServer it asks for routes
    environment: dict[str, str] = field(default_factory=dict)  # more than this command's own
    exit_status: int | None = None
    background: list[asyncio.Task[None]] = field(default_factory=list)  # held, so none is collected

    @property
    def log_path(self) -> Path:
        return self.directory / ("broker.log" if self.broker_name else f"{self.role}.log")

    @property
    def out_path(self) -> Path:
        """Where what the server prints goes: a CometMQ server's .out file, etcd's log."""
        return self.log_path if self.role == "etcd" else self.log_path.with_suffix(".out")

    @property
    def conf_path(self) -> Path:
        return self.directory / ("broker.conf" if self.broker_name else f"{self.role}.conf")

    @property
    def is_slave(self) -> bool:
        return self.role == "SLAVE"

    def out_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            with self.out_path.open("rb") as f:
                f.seek(self.out_start)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class StartFailed(CometMQError):
    """A server of the cluster exited, or was not ready in time, before it served."""

    def __init__(self, server: Server, reason: str) -> None:
        super().__init__(f"{server.label} did not start: {reason}")
        self.server = server


def plan(args: argparse.Namespace) -> list[Server]:
    """Every server of the cluster: the NameServer first, then etcd (with --etcd), then each group's
    brokers: its master and slaves, or in failover mode its 1 + --slaves candidates (brokerId 1, 2,
    …; the election makes one the master)."""
    root = Path(args.data_dir).expanduser().resolve()
    # Each broker takes its port and the one after it (the HA port); a group takes a multiple of 10.
    stride = 10 * math.ceil(2 * (args.slaves + 1) / 10)
    last_port = args.base_port + stride * (args.groups - 1) + 2 * args.slaves + 1
    if args.base_port and last_port > 65535:
        raise ConfigError(
            f"--base-port {args.base_port} leaves no room for {args.groups} groups: ports end at {last_port}"
        )
    servers = [Server("namesrv", "namesrv", root / "namesrv", args.namesrv_port)]
    if args.etcd:
        servers.append(Server("etcd", "etcd", root / "etcd", args.etcd_port))
    first_id = 1 if args.etcd else 0  # in failover mode a brokerId is an identity, never 0
    for group in range(args.groups):
        name = f"broker-{string.ascii_lowercase[group]}"
        base = args.base_port + stride * group if args.base_port else 0
        for index in range(args.slaves + 1):
            broker_id = first_id + index
            servers.append(
                Server(
                    f"{name}-{broker_id}",
                    "SLAVE" if index and not args.etcd else args.role,
                    root / f"{name}-{broker_id}",
                    base + 2 * index if base else 0,
                    broker_name=name,
                    broker_id=broker_id,
                )
            )
    if args.proxy_port is not None:
        servers.append(Server("proxy", "proxy", root / "proxy", args.proxy_port))
    if args.metrics_port is not None:
        served = [s for s in servers if s.role not in ("etcd", "proxy")]
        if args.metrics_port and args.metrics_port + len(served) - 1 > 65535:
            raise ConfigError(f"--metrics-port {args.metrics_port} leaves no room for {len(served)} servers")
        for index, server in enumerate(served):
            server.metrics_port = args.metrics_port + index if args.metrics_port else 0
    return servers


def check_ports_free(servers: list[Server], host: str) -> None:
    """Every fixed port the cluster listens on (each master's HA port too) is free, or ConfigError
    naming the first one taken and the options that choose others: said before any server starts,
    rather than by one server's log after the others started."""
    if any(s.role == "etcd" for s in servers):
        others = (
            "or etcd running?): stop it, or choose other ports with --namesrv-port, --base-port "
            "and --etcd-port"
        )
    else:
        others = "running?): stop it, or choose other ports with --namesrv-port and --base-port"
    for server in servers:
        ports = [server.port] if server.port else []
        if ports and (server.role == "etcd" or (server.broker_name and not server.is_slave)):
            ports.append(server.port + 1)  # a master's haListenPort, etcd's peer port
        if server.metrics_port:
            ports.append(server.metrics_port)
        for port in ports:
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
                try:
                    sock.bind((host, port))
                except OSError as exc:
                    if exc.errno != errno.EADDRINUSE:
                        raise
                    what = "port" if port == server.port else "HA port"
                    if server.role == "etcd":
                        what = "client port" if port == server.port else "peer port"
                    if port == server.metrics_port:
                        raise ConfigError(
                            f"{host}:{port} ({server.label}'s metrics port) is already in use (is another "
                            "CometMQ running?): stop it, or choose other ports with --metrics-port"
                        ) from None
                    raise ConfigError(
                        f"{host}:{port} ({server.label}'s {what}) is already in use (is another CometMQ "
                        f"{others}"
                    ) from None


def broker_conf(server: Server, args: argparse.Namespace, namesrv_addr: str, etcd_addr: str = "") -> str:
    """*server*'s broker.conf: the file given with -c, then the keys that place it in the cluster
    (``etcd_addr``: failover mode, through that etcd)."""
    base = Path(args.config).read_text(encoding="utf-8") if args.config else ""
    if base and not base.endswith("\n"):
        base += "\n"
    own = {
        "brokerClusterName": args.cluster,
        "brokerName": server.broker_name,
        "brokerId": server.broker_id,
        "brokerRole": server.role,
        "brokerIP1": args.host,
        "listenHost": args.host,
        "listenPort": server.port,
        "namesrvAddr": namesrv_addr,
        "storePathRootDir": server.directory,
    }
    if etcd_addr:
        own["etcdEndpoints"] = etcd_addr
    if server.metrics_port is None:
        # Off unless --metrics-port: brokers sharing a file's metricsPromExporterPort would collide.
        own["metricsExporterType"] = "DISABLE"
    header = "# Written by 'cometmq cluster up' at every start"
    source = f"; the lines of {args.config} first" if args.config else ""
    # Java properties: the last value of a key wins, so these override the file's.
    return f"{header}{source}.\n{base}" + "".join(f"{key}={value}\n" for key, value in own.items())


# The keys of a broker.conf that the name server reads too: access control and TLS mean the same there.
_NAMESRV_SHARED_KEYS = ("aclEnable", "plainAclFile", "initAuthenticationUser")


def namesrv_conf(args: argparse.Namespace) -> str:
    """The name server's namesrv.conf: the access-control and TLS keys of the file given with -c, so a
    cluster locked with them has its name server locked too (its users live in its own directory)."""
    given = read_properties(args.config) if args.config else {}
    shared = {key: value for key, value in given.items() if key in _NAMESRV_SHARED_KEYS or key in TLS_KEYS}
    source = f" from {args.config}" if args.config else ""
    return f"# Written by 'cometmq cluster up' at every start{source}.\n" + "".join(
        f"{key}={value}\n" for key, value in shared.items()
    )


def proxy_conf(args: argparse.Namespace, server: Server) -> str:
    """The proxy's proxy.conf: the name server's keys (its clients' access control and TLS are the
    cluster's), its users kept in its own directory."""
    return namesrv_conf(args) + f"authConfigPath={server.directory}\n"


def proxy_environment(args: argparse.Namespace) -> dict[str, str]:
    """How the proxy reaches the brokers of a cluster locked by the file given with -c: as the brokers'
    inner user (innerClientAuthenticationCredentials), over TLS when the brokers' own connections use
    it (tls.enable), trusting tls.client.trustCertPath. In its environment: a secret stays off the
    command line."""
    given = read_properties(args.config) if args.config else {}
    environment: dict[str, str] = {}
    inner = given.get("innerClientAuthenticationCredentials", "")
    if inner:
        try:
            keys = json.loads(inner)
            environment |= {"COMETMQ_ACCESS_KEY": keys["accessKey"], "COMETMQ_SECRET_KEY": keys["secretKey"]}
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                "innerClientAuthenticationCredentials is not JSON {accessKey, secretKey}"
            ) from None
    if given.get("tls.enable", "false").lower() == "true":
        environment["COMETMQ_TLS"] = "1"
        if given.get("tls.client.trustCertPath"):
            environment["COMETMQ_TLS_CA"] = given["tls.client.trustCertPath"]
    return environment


def etcd_binary() -> str:
    """The etcd program: on PATH, else Debian's; ConfigError saying how to install it."""
    found = shutil.which("etcd") or (ETCD_BINARY if os.access(ETCD_BINARY, os.X_OK) else None)
    if found is None:
        raise ConfigError(
            "--etcd needs etcd 3.4 or later, which is not installed: on Debian or Ubuntu run "
            "'apt-get install etcd-server' as root"
        )
    return found


def etcd_command(server: Server, args: argparse.Namespace) -> list[str]:
    """One etcd member on *server*'s port (clients) and the next (peers), data in its directory."""
    client_url = f"http://{args.host}:{server.port}"
    peer_url = f"http://{args.host}:{server.port + 1}"
    return [
        etcd_binary(),
        "--name",
        "cometmq",
        "--data-dir",
        str(server.directory / "data"),
        "--listen-client-urls",
        client_url,
        "--advertise-client-urls",
        client_url,
        "--listen-peer-urls",
        peer_url,
        "--initial-advertise-peer-urls",
        peer_url,
        "--initial-cluster",
        f"cometmq={peer_url}",
    ]


def _free_port_pair(host: str) -> int:
    """A port whose next port is free too, for etcd (which cannot be told to pick its own)."""
    while True:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port >= 65535:
            continue
        with socket.socket() as peer:
            try:
                peer.bind((host, port + 1))
            except OSError:
                continue
        return port


def _command(server: Server, args: argparse.Namespace) -> list[str]:
    metrics = ["--metrics-port", str(server.metrics_port)] if server.metrics_port is not None else []
    return _server_command(server, args) + metrics


def _server_command(server: Server, args: argparse.Namespace) -> list[str]:
    cometmq = [sys.executable, "-m", "cometmq"]
    if server.role == "proxy":
        return [
            *cometmq,
            "proxy",
            "-c",
            str(server.conf_path),
            "--namesrv",
            server.namesrv,
            "--host",
            args.host,
            "--port",
            str(server.port),
            *_log_options(server, args),
        ]
    if server.role == "namesrv":
        return [
            *cometmq,
            "namesrv",
            "-c",
            str(server.conf_path),
            "--data-dir",
            str(server.directory),
            "--host",
            args.host,
            "--port",
            str(server.port),
            *_log_options(server, args),
        ]
    return [*cometmq, "broker", "-c", str(server.conf_path), *_log_options(server, args)]


def _log_options(server: Server, args: argparse.Namespace) -> list[str]:
    return [
        "--log-level",
        args.log_level,
        "--log-file",
        str(server.log_path),
        "--log-max-size",
        str(args.log_max_size),
        "--log-backups",
        str(args.log_backups),
        "--log-format",
        args.log_format,
    ]


async def start(server: Server, args: argparse.Namespace) -> None:
    """Start *server* and wait for its ready line; StartFailed if it exits or is not ready in time."""
    server.directory.mkdir(parents=True, exist_ok=True)
    # Emptied at each start, so that it holds this run's output only and never grows run after run
    # (the server's log is the .log file, rotated).
    with server.out_path.open("wb") as out_file:
        # Its own process group: Ctrl-C in the terminal reaches this command alone, which stops the
        # servers in order (slaves, masters, then the NameServer they unregister from).
        server.process = await asyncio.create_subprocess_exec(
            *_command(server, args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=out_file,
            process_group=0,
            env={**os.environ, **server.environment, "PYTHONUNBUFFERED": "1"},
        )
    ready = {"namesrv": _NAMESRV_READY, "proxy": _PROXY_READY}.get(server.role, _BROKER_READY)
    try:
        line = await asyncio.wait_for(_ready_line(server), args.start_timeout)
    except TimeoutError:
        raise StartFailed(server, f"not ready after {args.start_timeout:g} s") from None
    found = ready.match(line) if line is not None else None
    if found is None:
        status = await server.process.wait()
        raise StartFailed(server, exit_text(status))
    server.address = found.group(1)
    metrics = _METRICS_URL.search(line) if line is not None else None
    server.metrics_url = metrics.group(1) if metrics is not None else ""
    server.background.append(asyncio.get_running_loop().create_task(_copy_output(server)))


async def start_etcd(server: Server, args: argparse.Namespace) -> None:
    """Start etcd and wait until it answers ``/health`` as healthy; StartFailed if it exits or is not
    healthy in time."""
    server.directory.mkdir(parents=True, exist_ok=True)
    if not server.port:
        server.port = _free_port_pair(args.host)
    server.out_start = server.out_path.stat().st_size if server.out_path.exists() else 0
    with server.out_path.open("ab") as out_file:
        server.process = await asyncio.create_subprocess_exec(
            *etcd_command(server, args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out_file,
            stderr=out_file,
            process_group=0,
        )
    server.address = f"{args.host}:{server.port}"
    deadline = time.monotonic() + args.start_timeout
    while not await etcd_healthy(server.address):
        if server.process.returncode is not None:
            raise StartFailed(server, exit_text(server.process.returncode))
        if time.monotonic() >= deadline:
            raise StartFailed(server, f"not healthy after {args.start_timeout:g} s")
        await asyncio.sleep(ETCD_HEALTH_INTERVAL_S)


async def etcd_healthy(addr: str) -> bool:
    """Whether the etcd at *addr* answers its ``/health`` endpoint with ``"health":"true"``."""
    host, _, port = addr.rpartition(":")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 1.0)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(f"GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n".encode())
        answer = await asyncio.wait_for(reader.read(), 2.0)
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
    return b'"health":"true"' in answer


async def _ready_line(server: Server) -> str | None:
    """The server's first line on stdout (its ready line), also written to its .out file; None at end."""
    assert server.process is not None and server.process.stdout is not None
    line = await server.process.stdout.readline()
    if not line:
        return None
    with server.out_path.open("ab") as out_file:
        out_file.write(line)
    return line.decode(errors="replace").rstrip("\n")


async def _copy_output(server: Server) -> None:
    """Anything else the server prints goes to its .out file, so it never blocks on a full pipe."""
    assert server.process is not None and server.process.stdout is not None
    while line := await server.process.stdout.readline():
        with server.out_path.open("ab") as out_file:
            out_file.write(line)


def exit_text(status: int) -> str:
    """How a server's process ended: "exit status 1", or "killed by signal 9 (SIGKILL)" rather than the
    -9 of asyncio's returncode."""
    if status >= 0:
        return f"exit status {status}"
    try:
        name = f" ({signal.Signals(-status).name})"
    except ValueError:
        name = ""
    return f"killed by signal {-status}{name}"


async def _watch(server: Server, stopping: asyncio.Event) -> None:
    """Report a server that exits while the cluster runs; nothing is restarted."""
    assert server.process is not None
    status = await server.process.wait()
    if not stopping.is_set():
        log.warning(
            "%s (%s, pid %d) ended, %s; not restarted (log: %s)",
            server.label,
            server.role,
            server.process.pid,
            exit_text(status),
            server.log_path,
        )


async def stop(server: Server, timeout: float) -> int:
    """SIGTERM and wait for a clean stop; SIGKILL after *timeout* seconds. Its exit status."""
    process = server.process
    assert process is not None
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):  # it exited a moment ago
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            log.warning("%s (pid %d) did not stop within %g s: killed", server.label, process.pid, timeout)
            process.kill()
            await process.wait()
    assert process.returncode is not None
    server.exit_status = process.returncode
    if server.role == "etcd" and process.returncode == -signal.SIGTERM:
        # etcd ends a clean stop by raising the SIGTERM it handled again.
        server.exit_status = 0
    return server.exit_status


async def stop_all(servers: list[Server], timeout: float) -> None:
    """Stop the started servers: the proxy, slaves, then masters, then the NameServer, then etcd (the
    brokers give their etcd leases back as they stop)."""
    started = [s for s in servers if s.process is not None]
    for stage in (
        [s for s in started if s.role == "proxy"],
        [s for s in started if s.is_slave],
        [s for s in started if s.broker_name and not s.is_slave],
        [s for s in started if s.role == "namesrv"],
        [s for s in started if s.role == "etcd"],
    ):
        await asyncio.gather(*(stop(s, timeout) for s in stage))


def _table(servers: list[Server]) -> str:
    metrics = any(s.metrics_url for s in servers)
    rows = [
        [
            s.label,
            s.role,
            s.broker_name or "-",
            s.broker_id if s.broker_name else "-",
            s.address,
            s.process.pid if s.process is not None else "-",
            *([s.metrics_url or "-"] if metrics else []),
            s.log_path,
        ]
        for s in servers
    ]
    headers = ["SERVER", "ROLE", "BROKER", "ID", "ADDRESS", "PID", *(["METRICS"] if metrics else []), "LOG"]
    return format_table(headers, rows)


async def _start_all(servers: list[Server], args: argparse.Namespace) -> None:
    namesrv = servers[0]
    brokers = [s for s in servers if s.broker_name]
    namesrv.directory.mkdir(parents=True, exist_ok=True)
    namesrv.conf_path.write_text(namesrv_conf(args), encoding="utf-8")
    await start(namesrv, args)
    etcd_addr = ""
    for etcd in (s for s in servers if s.role == "etcd"):
        await start_etcd(etcd, args)
        etcd_addr = etcd.address
    for stage in ([b for b in brokers if not b.is_slave], [b for b in brokers if b.is_slave]):
        for broker in stage:
            broker.directory.mkdir(parents=True, exist_ok=True)
            conf = broker_conf(broker, args, namesrv.address, etcd_addr)
            broker.conf_path.write_text(conf, encoding="utf-8")
        # Masters first, so each slave's first registration already finds its master.
        results = await asyncio.gather(*(start(b, args) for b in stage), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
    for proxy in (s for s in servers if s.role == "proxy"):
        proxy.directory.mkdir(parents=True, exist_ok=True)
        proxy.conf_path.write_text(proxy_conf(args, proxy), encoding="utf-8")
        proxy.namesrv = namesrv.address
        proxy.environment = proxy_environment(args)
        await start(proxy, args)


async def _start_or_interrupt(
    servers: list[Server], args: argparse.Namespace, shutdown: ShutdownSignal
) -> bool:
    """Start every server unless Ctrl-C or SIGTERM comes first; whether they all started."""
    starting = asyncio.ensure_future(_start_all(servers, args))
    interrupted = asyncio.ensure_future(shutdown.wait())
    try:
        await asyncio.wait({starting, interrupted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        interrupted.cancel()
        if not starting.done():
            starting.cancel()
        await asyncio.gather(starting, interrupted, return_exceptions=True)
    if starting.cancelled():
        return False
    starting.result()  # a StartFailed
    return True


async def _cluster_up(args: argparse.Namespace) -> int:
    servers = plan(args)
    check_ports_free(servers, args.host)
    if args.etcd:
        etcd_binary()  # said before any server starts
    # Starting takes seconds (more on a busy machine), and the servers log to their files.
    if args.etcd:
        log.info(
            "starting a NameServer, etcd, then %d broker(s) whose masters etcd elects, each logging to "
            "its directory under %s",
            args.groups * (args.slaves + 1),
            servers[0].directory.parent,
        )
    else:
        log.info(
            "starting a NameServer, %d master(s), then %d slave(s), each logging to its directory under %s",
            args.groups,
            args.groups * args.slaves,
            servers[0].directory.parent,
        )
    if args.role == "SYNC_MASTER" and not args.slaves:
        log.warning(
            "--role SYNC_MASTER with --slaves 0: no slave can confirm a send, so every send is answered "
            "SLAVE_NOT_AVAILABLE (stored on the master alone)"
        )
    stopping = asyncio.Event()
    failure: StartFailed | None = None
    with ShutdownSignal() as shutdown:
        try:
            if await _start_or_interrupt(servers, args, shutdown):
                for server in servers:
                    server.background.append(asyncio.get_running_loop().create_task(_watch(server, stopping)))
                print(_table(servers), flush=True)
                # Scripts and tests wait for this line; flushed so a pipe sees it at once.
                proxy = "".join(f", proxy {s.address}" for s in servers if s.role == "proxy")
                print(
                    f"CometMQ cluster ready: namesrv {servers[0].address}{proxy}, cluster {args.cluster}, "
                    f"{_groups_text(servers, args)}, data in {servers[0].directory.parent}; Ctrl-C stops it",
                    flush=True,
                )
                await shutdown.wait()
        except StartFailed as exc:
            failure = exc
        finally:
            stopping.set()
            await stop_all(servers, args.stop_timeout)
    for server in servers:
        if server.exit_status is not None:
            print(f"{server.label}: {exit_text(server.exit_status)}", flush=True)
    if failure is not None:
        tail = failure.server.out_tail()
        print(f"--- the end of {failure.server.out_path} ---\n{tail}\n---", file=sys.stderr, flush=True)
        raise failure
    unclean = [
        f"{s.label} {exit_text(status)}, see {s.out_path}" for s in servers if (status := s.exit_status)
    ]
    if unclean:
        raise CometMQError("not every server stopped cleanly: " + "; ".join(unclean))
    return 0


def _groups_text(servers: list[Server], args: argparse.Namespace) -> str:
    names = ", ".join(sorted({s.broker_name for s in servers if s.broker_name}))
    if args.etcd:
        etcd = next(s for s in servers if s.role == "etcd")
        return (
            f"{args.role} {names} of {args.slaves + 1} broker(s) each, masters elected through "
            f"etcd {etcd.address}"
        )
    return f"{args.role} {names} with {args.slaves} slave(s) each"


def run_cluster_up(args: argparse.Namespace) -> int:
    setup_logging("INFO")
    return run_async(_cluster_up(args))
