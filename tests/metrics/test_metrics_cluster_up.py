"""``cometmq cluster up --metrics-port``: every server's metrics endpoint, on BASE + n or free ports,
listed in the table; without the option, none."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from metrics_support import scrape_blocking

from cometmq.broker import BrokerConfig
from cometmq.cli._cluster import broker_conf, plan
from cometmq.cli._main import build_parser
from processes import COMMAND, TEST_BROKER_CONF, subprocess_env
from waiting import wait_until_blocking


def test_each_server_gets_base_plus_its_place_and_none_without_the_option() -> None:
    servers = plan(build_parser().parse_args(["cluster", "up", "--metrics-port", "9000"]))
    assert [(s.label, s.metrics_port) for s in servers] == [
        ("namesrv", 9000),
        ("broker-a-0", 9001),
        ("broker-a-1", 9002),
        ("broker-b-0", 9003),
        ("broker-b-1", 9004),
    ]
    assert all(s.metrics_port is None for s in plan(build_parser().parse_args(["cluster", "up"])))


def test_a_files_metrics_keys_do_not_turn_every_brokers_metrics_on(tmp_path: Path) -> None:
    given = tmp_path / "given.conf"
    given.write_text("metricsExporterType=PROM\n")
    for extra, expected in (([], "DISABLE"), (["--metrics-port", "0"], "PROM")):
        args = build_parser().parse_args(["cluster", "up", "-c", str(given), *extra])
        broker = plan(args)[1]
        written = tmp_path / "broker.conf"
        written.write_text(broker_conf(broker, args, "127.0.0.1:9876"))
        # With --metrics-port the broker's command line turns them on (and picks the port) instead.
        assert BrokerConfig.from_file(written).metrics_exporter_type.name == expected


def test_the_table_lists_every_servers_metrics_endpoint(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(TEST_BROKER_CONF)
    out = tmp_path / "cluster-up.out"
    args = [
        "cluster",
        "up",
        "--data-dir",
        str(tmp_path / "cluster"),
        "--namesrv-port",
        "0",
        "--base-port",
        "0",
    ]
    args += ["--groups", "1", "--slaves", "0", "-c", str(conf), "--metrics-port", "0"]
    with out.open("wb") as stdout:
        proc = subprocess.Popen(
            [*COMMAND, *args], stdout=stdout, stderr=subprocess.DEVNULL, env=subprocess_env()
        )
    try:
        wait_until_blocking(lambda: "CometMQ cluster ready:" in out.read_text(), message="cluster ready")
        table = out.read_text().splitlines()
        assert "METRICS" in table[0]
        rows = {line.split()[0]: line for line in table[1:] if line.startswith(("namesrv", "broker-"))}
        assert set(rows) == {"namesrv", "broker-a-0"}
        for label, row in rows.items():
            url = next(word for word in row.split() if word.startswith("http://"))
            address = row.split()[4]
            if label == "namesrv":
                (sample,) = scrape_blocking(url)["rocketmq_namesrv_topics"]
                assert sample.labels["node_id"] == address
            else:
                (sample,) = scrape_blocking(url)["rocketmq_topic_number"]
                assert sample.labels["node_id"] == "broker-a" and sample.value > 0
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
