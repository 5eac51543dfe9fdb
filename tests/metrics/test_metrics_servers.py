"""Metrics endpoints of the server commands and of a name server: on by default in standalone (one
endpoint for both servers), off by default for ``cometmq broker``, turned on by ``--metrics-port``,
and a port in use said in one line."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from metrics_support import scrape, scrape_blocking, value

from _support import run, running_broker  # isort: skip (put on the path by metrics_support)
from cometmq.broker import BrokerConfig
from cometmq.client import Message, Producer
from cometmq.errors import ConfigError
from cometmq.metrics import MetricsExporterType
from cometmq.namesrv import NameServer
from cometmq.namesrv.config import NamesrvConfig
from processes import (
    TEST_BROKER_CONF,
    ServerProcess,
    broker_address,
    cometmq,
    standalone_args,
    start_standalone,
)
from waiting import wait_until_blocking

METRICS_URL = re.compile(r", metrics (http://127\.0\.0\.1:\d+/metrics)(,|$)")


@pytest.mark.parametrize("config_class", [BrokerConfig, NamesrvConfig])
def test_rocketmq_5s_keys_choose_the_exporter_and_its_address(config_class: type[Any]) -> None:
    config = config_class()
    assert config.metrics_exporter_type is MetricsExporterType.DISABLE
    assert config.metrics_prom_exporter_port == 5557
    config.update(
        {"metricsExporterType": "PROM", "metricsPromExporterHost": "0.0.0.0", "metricsPromExporterPort": "0"}
    )
    assert config.metrics_exporter_type is MetricsExporterType.PROM
    assert (config.metrics_prom_exporter_host, config.metrics_prom_exporter_port) == ("0.0.0.0", 0)
    with pytest.raises(ConfigError, match="metricsExporterType"):
        config.update({"metricsExporterType": "OTLP_GRPC"})  # RocketMQ's, not CometMQ's
    with pytest.raises(ConfigError, match="metricsPromExporterPort"):
        config.update({"metricsPromExporterPort": "70000"})


def test_a_name_server_counts_its_brokers_topics_and_requests(tmp_path: Path) -> None:
    async def scenario() -> None:
        namesrv = NameServer("127.0.0.1", 0, metrics_port=0)
        await namesrv.start()
        try:
            assert namesrv.metrics_endpoint is not None
            addr = f"127.0.0.1:{namesrv.port}"
            async with running_broker(tmp_path, namesrvAddr=addr):
                families = await scrape(namesrv.metrics_endpoint.url)
                topics = len(namesrv.routes.topic_queue_table)
            common = {"node_type": "namesrv", "node_id": addr}
            brokers = families["rocketmq_namesrv_brokers"]
            assert value(brokers, **common, cluster="DefaultCluster", role="master") == 1
            topic_count = value(families["rocketmq_namesrv_topics"], **common, cluster="DefaultCluster")
            assert topics > 0 and topic_count == topics
            registrations = value(
                families["rocketmq_rpc_latency"],
                "rocketmq_rpc_latency_count",
                **common,
                request_code="register_broker",
                response_code="success",
            )
            assert registrations >= 1
        finally:
            await namesrv.stop()

    run(scenario())


def test_standalone_serves_both_servers_metrics_on_one_endpoint(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(TEST_BROKER_CONF)
    server, namesrv = start_standalone(tmp_path / "data", conf)
    try:
        found = METRICS_URL.search(server.ready_line)
        assert found is not None, server.ready_line
        assert broker_address(server)  # the ready line's start is as the tests read it

        async def produce() -> None:
            async with Producer("Meters", namesrv) as producer:
                await producer.send_batch([Message("Standalone", b"m%d" % i) for i in range(5)])

        asyncio.run(produce())
        families = scrape_blocking(found.group(1))
        assert value(families["rocketmq_messages_in"], node_type="broker", topic="Standalone") == 5
        node_types = {sample.labels["node_type"] for sample in families["rocketmq_rpc_latency"]}
        assert node_types == {"broker", "namesrv"}
    finally:
        server.terminate()


def test_cometmq_broker_serves_no_metrics_unless_asked(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(TEST_BROKER_CONF)
    namesrv = ServerProcess(["namesrv", "--port", "0", "--metrics-port", "0"], tmp_path / "namesrv.log")
    broker: ServerProcess | None = None
    try:
        ready = namesrv.wait_ready("CometMQ namesrv ready:")
        found = METRICS_URL.search(ready)
        assert found is not None, ready
        addr = ready.split("listening on ")[1].split(",")[0]
        broker = ServerProcess(
            ["broker", "-n", addr, "--port", "0", "--data-dir", str(tmp_path / "data"), "-c", str(conf)],
            tmp_path / "broker.log",
        )
        broker_ready = broker.wait_ready("CometMQ broker ready:")
        assert ", metrics" not in broker_ready

        def registered() -> bool:
            brokers = scrape_blocking(found.group(1)).get("rocketmq_namesrv_brokers", [])
            return sum(sample.value for sample in brokers) == 1

        wait_until_blocking(registered, message="the broker counted by the name server")
    finally:
        if broker is not None:
            broker.terminate()
        namesrv.terminate()


def test_a_metrics_port_in_use_ends_standalone_with_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cometmq(*standalone_args(tmp_path / "data", "--metrics-port", str(port)))
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"cometmq: error: the metrics port 127.0.0.1:{port} is already in use"), last
    assert "--metrics-port" in last
