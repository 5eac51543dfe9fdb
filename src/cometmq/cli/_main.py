"""The ``cometmq`` command: argument parsing and the one place errors become a line on stderr."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cometmq import __version__
from cometmq.cli._admin import add_admin_commands
from cometmq.cli._auth import add_auth_commands
from cometmq.cli._bench import add_bench_commands
from cometmq.cli._connect import add_connect_options
from cometmq.cli._dashboard import add_dashboard_commands
from cometmq.cli._dlq import add_dlq_commands
from cometmq.cli._group import add_group_commands
from cometmq.cli._message import add_message_commands
from cometmq.cli._ops import add_ops_commands
from cometmq.cli._pipeline import add_pipeline_commands
from cometmq.cli._servers import add_server_commands
from cometmq.errors import BrokerError, CometMQError

PROG = "cometmq"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "CometMQ, a message queue that speaks the RocketMQ 4.x protocol. Run the servers "
            "(standalone, namesrv, broker, and the RocketMQ 5 gRPC proxy), administer a running cluster "
            "(topic, cluster, group, producer, stats), find "
            "stored messages (message), recover dead letters (dlq), manage users and ACLs (user, acl), "
            "watch and operate it in a browser (dashboard), "
            "measure a cluster (bench) or run the reference Spark pipeline (pipeline)."
        ),
        epilog=f"Run '{PROG} COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_connect_options(parser)  # also taken after the command, by every command that talks to servers
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_server_commands(commands)
    add_admin_commands(commands)
    add_message_commands(commands)
    add_dlq_commands(commands)
    add_group_commands(commands)
    add_ops_commands(commands)
    add_auth_commands(commands)
    add_bench_commands(commands)
    add_pipeline_commands(commands)
    add_dashboard_commands(commands)
    return parser


def _fail(message: str, status: int = 1) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
        return status
    except BrokerError as exc:
        return _fail(f"{exc.remark or 'request failed'} (response code {exc.code})")
    except CometMQError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(exc.strerror if exc.strerror and not str(exc) else str(exc))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
