"""``cometmq dashboard``: serve the web dashboard of a cluster until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse

from cometmq.cli._admin import add_namesrv_option
from cometmq.cli._connect import add_connect_options, security
from cometmq.cli._logs import add_log_options, setup_server_logging
from cometmq.cli._loop import run_async
from cometmq.cli._servers import (
    DEFAULT_DASHBOARD_PORT,
    ShutdownSignal,
    add_allowed_host_option,
    naming_flag_if_taken,
    print_ready_line,
)


def add_dashboard_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dashboard = commands.add_parser(
        "dashboard",
        help="serve a web dashboard of a cluster",
        description=(
            "Serve a web dashboard of the cluster at the NameServer: brokers and their rates, topics, "
            "consumer groups and their lag, messages, dead letters and message traces. It acts as the "
            "user of --access-key (and over --tls), so the cluster's ACL decides what its pages may "
            "show and do."
        ),
    )
    add_namesrv_option(dashboard)
    dashboard.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="HOST",
        help="address to serve on (default: 127.0.0.1, this machine only; anyone who reaches the port "
        "can act on the cluster)",
    )
    dashboard.add_argument(
        "--port",
        type=int,
        default=DEFAULT_DASHBOARD_PORT,
        metavar="PORT",
        help=f"port to serve on; 0: a free one (default: {DEFAULT_DASHBOARD_PORT})",
    )
    add_allowed_host_option(dashboard)
    add_connect_options(dashboard)
    add_log_options(dashboard)
    dashboard.set_defaults(func=_run_dashboard)


def _run_dashboard(args: argparse.Namespace) -> int:
    setup_server_logging(args)
    return run_async(_dashboard(args))


async def _dashboard(args: argparse.Namespace) -> int:
    from cometmq.dashboard import start_dashboard

    with ShutdownSignal() as shutdown:
        with naming_flag_if_taken(args.host, args.port, "--port"):
            dashboard = await start_dashboard(
                args.namesrv,
                args.host,
                args.port,
                more_hosts=args.allowed_host,
                **security(args).client_options(),
            )
        try:
            print_ready_line(f"CometMQ dashboard ready: {dashboard.url}")
            await shutdown.wait()
        finally:
            await dashboard.stop()
    return 0
