"""The servers' logging: where it goes (stderr, or a rotating file), how each line reads (text or JSON),
and the start-up summary they log once they serve."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import logging.handlers
import os
import platform
import re
import resource
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from cometmq import __version__
from cometmq.cli._admin import whole_number
from cometmq.errors import ConfigError
from cometmq.remoting.tls import TlsMode

if TYPE_CHECKING:
    from cometmq.broker import Broker
    from cometmq.namesrv import NameServer

log = logging.getLogger("cometmq.cli")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")
DEFAULT_LOG_MAX_SIZE = "100MiB"
DEFAULT_LOG_BACKUPS = 10
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def add_log_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=LOG_LEVELS,
        help="the least important messages logged (default: INFO)",
    )
    parser.add_argument(
        "--log-file",
        metavar="PATH",
        help="log to this file, rotated by size, instead of stderr; stderr then gets only the "
        "warnings and errors (default: stderr only)",
    )
    add_log_file_options(parser)


def add_log_file_options(parser: argparse.ArgumentParser) -> None:
    """How a log file is rotated and how each line reads: the servers' flags, and ``cluster up``'s for
    its servers."""
    parser.add_argument(
        "--log-max-size",
        type=byte_size,
        default=DEFAULT_LOG_MAX_SIZE,
        metavar="SIZE",
        help="rotate the log file once it would grow past SIZE bytes (K, M, G: KiB, MiB, GiB); "
        f"0: never (default: {DEFAULT_LOG_MAX_SIZE})",
    )
    parser.add_argument(
        "--log-backups",
        type=whole_number(1),
        default=DEFAULT_LOG_BACKUPS,
        metavar="N",
        help=f"rotated log files kept: FILE.1 (the newest) to FILE.N (default: {DEFAULT_LOG_BACKUPS})",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        type=str.lower,
        choices=LOG_FORMATS,
        help="text: 'time level logger: message' lines; json: one JSON object a line, with time, level, "
        "logger, message and, for a failure, exception (default: text)",
    )


_SIZE = re.compile(r"(\d+)\s*(?:([KMG])(?:I?B)?|B)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def byte_size(text: str) -> int:
    """An option's type: a number of bytes, ``1048576``, ``1024K``, ``100MiB``, ``1G``."""
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (a number of bytes, or 512K, 100M, 1G)")
    return int(found.group(1)) * _UNITS[(found.group(2) or "").upper()]


def setup_logging(
    level: str,
    *,
    log_file: str | None = None,
    max_bytes: int = 0,
    backups: int = DEFAULT_LOG_BACKUPS,
    json_lines: bool = False,
) -> None:
    """Log at *level* to stderr; with *log_file*, to that file (rotated past *max_bytes*, 0: never,
    keeping *backups* older files), and only warnings and errors to stderr, where a terminal or a
    service manager's journal shows them."""
    formatter: logging.Formatter = JsonLineFormatter() if json_lines else OneLineFormatter(TEXT_FORMAT)
    console = logging.StreamHandler()
    handlers: list[logging.Handler] = [console]
    if log_file:
        path = Path(log_file).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # A lone surrogate (a JSON body may carry an escaped one) is written escaped, not lost:
            # strict UTF-8 would drop the whole record. stderr escapes them already (Python's default).
            file = logging.handlers.RotatingFileHandler(
                path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8", errors="backslashreplace"
            )
        except OSError as exc:
            raise ConfigError(f"cannot write the log file {path}: {exc.strerror}") from None
        console.setLevel(logging.WARNING)
        handlers.append(file)
    for handler in handlers:
        handler.setFormatter(formatter)
    logging.basicConfig(level=level, handlers=handlers)


def setup_server_logging(args: argparse.Namespace) -> None:
    """``setup_logging`` as a server command's log options say."""
    setup_logging(
        args.log_level,
        log_file=args.log_file,
        max_bytes=args.log_max_size,
        backups=args.log_backups,
        json_lines=args.log_format == "json",
    )


# Characters that would break a log line or forge another: C0 and C1 controls (a newline, a carriage
# return, escape sequences), DEL, and Unicode's line and paragraph separators.
_LINE_BREAKING = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
}
# The ones JSON leaves as they are (it escapes C0 controls itself), as JSON escapes.
_JSON_LINE_BREAKING = {code: f"\\u{code:04x}" for code in (*range(0x7F, 0xA0), 0x2028, 0x2029)}


class OneLineFormatter(logging.Formatter):
    """Writes each record's message on one line: names and remarks come from clients, and one holding a
    newline would otherwise write a line of the client's choosing into the log. A traceback after the
    message keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).translate(_LINE_BREAKING)


class JsonLineFormatter(logging.Formatter):
    """One JSON object a record, on one line (a traceback included): ``time`` (ISO 8601, local time
    with its offset), ``level``, ``logger``, ``message``, and ``exception`` when the record has one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # Readable UTF-8; what a reader could take for a line break is escaped.
        return json.dumps(entry, ensure_ascii=False).translate(_JSON_LINE_BREAKING)


def log_startup_summary(
    *,
    namesrv: NameServer | None = None,
    broker: Broker | None = None,
    urls: Mapping[str, str] | None = None,
) -> None:
    """A few INFO lines saying what this process serves and how, once it serves: the version, the name
    server's and the broker's addresses, the broker's role, data directory, flush mode, busy polling,
    access control and TLS, and the web addresses in *urls* (name → URL: metrics, dashboard)."""
    loop = type(asyncio.get_running_loop()).__module__.partition(".")[0]
    open_files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    log.info(
        "CometMQ %s on Python %s (%s event loop), pid %d, open files up to %s",
        __version__,
        platform.python_version(),
        loop,
        os.getpid(),
        "unlimited" if open_files == resource.RLIM_INFINITY else open_files,
    )
    if namesrv is not None:
        log.info(
            "name server at %s:%d, ACL %s, TLS %s",
            namesrv.host,
            namesrv.port,
            _on_off(namesrv.access_control is not None),
            _tls_text(namesrv.tls_mode),
        )
    if broker is not None:
        config = broker.config
        ha = "" if broker.is_slave else f", HA port {broker.ha_port}"
        failover = f", failover through etcd {config.etcd_endpoints}" if config.failover else ""
        log.info(
            "broker %s of cluster %s: %s (brokerId %d) at %s, listening on %s:%d%s, name servers %s%s",
            config.broker_name,
            config.broker_cluster_name,
            broker.role.value,
            broker.registered_id,
            config.broker_addr,
            config.bind_host,
            broker.port,
            ha,
            config.namesrv_addr or "none",
            failover,
        )
        busy_poll = (
            "off"
            if not config.busy_poll_micros
            else f"up to {config.busy_poll_micros} µs, adaptive"
            if config.busy_poll_adaptive
            else f"{config.busy_poll_micros} µs, fixed"
        )
        load = f"every {config.load_summary_interval} s" if config.load_summary_interval else "off"
        log.info(
            "broker %s: data in %s, %s, busy polling %s, ACL %s, TLS %s, load summary %s",
            config.broker_name,
            broker.root_dir,
            config.flush_disk_type.value,
            busy_poll,
            _on_off(broker.access_control is not None),
            _tls_text(config.tls.mode),
            load,
        )
    if urls:
        log.info("web: %s", ", ".join(f"{name} {url}" for name, url in urls.items()))


def _on_off(on: bool) -> str:
    return "on" if on else "off"


def _tls_text(mode: TlsMode) -> str:
    return "off" if mode is TlsMode.DISABLED else mode.value
