"""A broker's /metrics scraped over HTTP after real sends, pulls and commits: RocketMQ 5's names and
labels, the values they should have, and the rpc-latency histogram."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from metrics_support import scrape, value
from prometheus_client.exposition import generate_latest

from _support import (  # isort: skip (put on the path by metrics_support)
    broker_and_client,
    commit_request,
    name_server,
    pull,
    run,
    running_broker,
    send,
    send_request,
)
from cometmq.broker import Broker, BrokerConfig
from cometmq.metrics import MetricsExporterType
from cometmq.metrics import _app as metrics_app_module
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.batch import BatchEntry, encode_batch_body
from cometmq.remoting import RemotingClient
from waiting import wait_until

COMMON = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
PROM = {"metricsExporterType": "PROM", "metricsPromExporterPort": 0}


def test_metrics_are_off_unless_the_exporter_type_is_prom(tmp_path: Path) -> None:
    assert BrokerConfig().metrics_exporter_type is MetricsExporterType.DISABLE

    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            assert broker.metrics is None and broker.metrics_endpoint is None

    run(scenario())


def test_sends_pulls_commits_and_lag_are_counted_by_topic_and_group(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **PROM) as (broker, addr, client):
            assert broker.metrics_endpoint is not None
            url = broker.metrics_endpoint.url
            assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
            for i in range(3):
                await send(client, addr, "Metered", b"single-%d" % i)
            entries = [BatchEntry(0, b"batch-%d" % i, "") for i in range(10)]
            batch = send_request("Metered", encode_batch_body(entries), 0, v2=False, batch="1")
            assert (await client.invoke(addr, batch)).code == ResponseCode.SUCCESS
            response, records = await pull(client, addr, "Metered", 0, 0, group="Readers", max_nums=8)
            assert len(records) == 8
            stored_bytes = sum(totals[1] for totals in broker.stats.put_by_topic.values())
            pulled_bytes = sum(len(part) for part in response.body_parts or [response.body])
            # The group committed 5 of the 8 it pulled: 13 - 5 behind, 3 in flight.
            committed = await client.invoke(addr, commit_request("Readers", "Metered", 0, 5))
            assert committed.code == ResponseCode.SUCCESS

            families = await scrape(url)
            topic = {**COMMON, "topic": "Metered"}
            grouped = {**topic, "consumer_group": "Readers"}
            assert value(families["rocketmq_messages_in"], **topic) == 13
            assert value(families["rocketmq_throughput_in"], **topic) == stored_bytes > 0
            assert value(families["rocketmq_messages_out"], **grouped) == 8
            assert value(families["rocketmq_throughput_out"], **grouped) == pulled_bytes
            assert value(families["rocketmq_consumer_lag_messages"], **grouped) == 8
            assert value(families["rocketmq_consumer_inflight_messages"], **grouped) == 3
            lag_labels = families["rocketmq_consumer_lag_messages"][0].labels
            assert (lag_labels["is_retry"], lag_labels["is_system"]) == ("false", "false")
            # The oldest message not consumed was stored before the scrape.
            age = value(families["rocketmq_consumer_lag_latency"], **grouped)
            assert 0 <= age <= int(time.time() * 1000) - records[5].store_timestamp
            assert value(families["rocketmq_topic_number"], **COMMON) == len(broker.topics.topics)
            assert value(families["rocketmq_consumer_group_number"], **COMMON) == len(broker.groups.groups)
            assert value(families["rocketmq_storage_size"], **COMMON) > 0
            flush_behind = value(families["rocketmq_storage_flush_behind_bytes"], **COMMON)
            assert 0 <= flush_behind <= broker.store.commitlog_max_offset
            assert value(families["rocketmq_half_messages"], **COMMON) == 0

            # Committing everything leaves nothing behind and nothing in flight.
            await client.invoke(addr, commit_request("Readers", "Metered", 0, 13))
            families = await scrape(url)
            assert value(families["rocketmq_consumer_lag_messages"], **grouped) == 0
            assert value(families["rocketmq_consumer_lag_latency"], **grouped) == 0
            assert value(families["rocketmq_consumer_inflight_messages"], **grouped) == 3 - 3

    run(scenario())


def test_rpc_latency_is_a_histogram_by_request_and_response_code(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **PROM) as (broker, addr, client):
            assert broker.metrics_endpoint is not None
            for i in range(4):
                await send(client, addr, "Timed", b"m%d" % i)
            # A request refused: its own series, by its response code.
            missing = RemotingCommand(code=RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "Timed"})
            refused = await client.invoke(addr, missing)
            assert refused.code == ResponseCode.SYSTEM_ERROR
            # A pull answered at once, and one held until its deadline (answered later, counted then,
            # in a series of its own).
            found, _ = await pull(client, addr, "Timed", 0, 0)
            assert found.code == ResponseCode.SUCCESS
            held, _ = await pull(client, addr, "Timed", 0, 4, suspend_ms=100)
            assert held.code == ResponseCode.PULL_NOT_FOUND

            samples = (await scrape(broker.metrics_endpoint.url))["rocketmq_rpc_latency"]

            def series(
                request_code: str, response_code: str, long_polling: str = "false"
            ) -> dict[str, float]:
                labels = {
                    **COMMON,
                    "protocol_type": "remoting",
                    "request_code": request_code,
                    "response_code": response_code,
                    "is_long_polling": long_polling,
                    "result": "success",
                }
                return {
                    s.labels.get("le", s.name.rpartition("_")[2]): s.value
                    for s in samples
                    if all(s.labels.get(k) == v for k, v in labels.items())
                }

            sends = series("send_message_v2", "success")
            assert sends["count"] == sends["+Inf"] == 4
            bounds = ["1.0", "3.0", "5.0", "7.0", "10.0", "100.0", "1000.0", "2000.0", "3000.0", "+Inf"]
            cumulative = [sends[bound] for bound in bounds]
            assert cumulative == sorted(cumulative)  # each bucket holds the ones below it
            assert sends["sum"] > 0
            assert series("get_max_offset", "system_error")["count"] == 1
            assert series("pull_message", "success")["count"] == 1
            assert series("pull_message", "pull_not_found") == {}
            pulls = series("pull_message", "pull_not_found", long_polling="true")
            assert pulls["count"] == 1
            assert pulls["sum"] >= 100 * 0.5  # held for most of its 100 ms at least

    run(scenario())


def test_request_codes_the_broker_does_not_serve_share_one_row(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **PROM) as (broker, addr, client):
            assert broker.metrics_endpoint is not None
            answers = await asyncio.gather(
                *(client.invoke(addr, RemotingCommand(code=100_000 + i)) for i in range(300))
            )
            assert {answer.code for answer in answers} == {ResponseCode.REQUEST_CODE_NOT_SUPPORTED}
            samples = (await scrape(broker.metrics_endpoint.url))["rocketmq_rpc_latency"]
            counts = {
                (s.labels["request_code"], s.labels["response_code"]): s.value
                for s in samples
                if s.name.endswith("_count")
            }
            assert counts == {("unknown", "request_code_not_supported"): 300}

    run(scenario())


def test_a_scrape_reads_a_lagging_queues_oldest_store_time_once_while_it_stays_the_oldest(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **PROM) as (broker, addr, client):
            assert broker.metrics_endpoint is not None
            for i in range(3):
                await send(client, addr, "Slow", b"m%d" % i)
            for group in ("G1", "G2", "G3"):
                assert (await client.invoke(addr, commit_request(group, "Slow", 0, 1))).code == 0
            reads: list[tuple[str, int, int]] = []
            store_time_at = broker.store.store_time_at

            def counted(topic: str, queue_id: int, offset: int) -> int:
                reads.append((topic, queue_id, offset))
                return store_time_at(topic, queue_id, offset)

            broker.store.store_time_at = counted  # type: ignore[method-assign]
            first = await scrape(broker.metrics_endpoint.url)
            assert reads == [("Slow", 0, 1)]  # three groups at the same offset: read once
            second = await scrape(broker.metrics_endpoint.url)
            assert reads == [("Slow", 0, 1)]  # nothing moved: not read again
            lag = "rocketmq_consumer_lag_latency"
            for group in ("G1", "G2", "G3"):
                assert (
                    value(second[lag], **COMMON, consumer_group=group)
                    >= value(first[lag], **COMMON, consumer_group=group)
                    > 0
                )
            assert (await client.invoke(addr, commit_request("G1", "Slow", 0, 2))).code == 0
            await scrape(broker.metrics_endpoint.url)
            assert reads == [("Slow", 0, 1), ("Slow", 0, 2)]

    run(scenario())


def test_messages_sent_to_the_dlq_are_counted_by_group_and_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **PROM) as (broker, addr, client):
            assert broker.metrics_endpoint is not None
            for i in range(2):
                offset, _ = await send(client, addr, "Doomed", b"m%d" % i)
                fields = {"offset": str(offset), "group": "Quitters", "delayLevel": "-1"}
                back = RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=fields)
                assert (await client.invoke(addr, back)).code == ResponseCode.SUCCESS
            families = await scrape(broker.metrics_endpoint.url)
            dlq = families["rocketmq_send_to_dlq_messages"]
            assert value(dlq, **COMMON, topic="Doomed", consumer_group="Quitters") == 2

    run(scenario())


def test_producer_and_consumer_connections_by_group_language_and_mode(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_and_client(tmp_path, **PROM) as (broker, addr, client):
            assert broker.metrics_endpoint is not None
            heartbeat = {
                "clientID": "client-1",
                "producerDataSet": [{"groupName": "Makers"}],
                "consumerDataSet": [
                    {
                        "groupName": "Takers",
                        "consumeType": "CONSUME_ACTIVELY",
                        "messageModel": "CLUSTERING",
                        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                        "subscriptionDataSet": [],
                        "unitMode": False,
                    }
                ],
            }
            request = RemotingCommand(code=RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
            answer = await client.invoke(addr, request)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            families = await scrape(broker.metrics_endpoint.url)
            producers = families["rocketmq_producer_connections"]
            client_labels = {"version": "v4_9_8", "protocol_type": "remoting"}  # MQVersion's name of 409
            assert value(producers, **COMMON, language="python", **client_labels) == 1
            consumers = families["rocketmq_consumer_connections"]
            assert (
                value(consumers, **COMMON, consumer_group="Takers", consume_mode="pull", **client_labels) == 1
            )

    run(scenario())


def test_replication_lag_is_given_by_the_master_per_slave_and_by_the_slave(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with name_server() as (_, namesrv):
            master_settings = {**PROM, "namesrvAddr": namesrv}
            slave_settings = {**master_settings, "brokerRole": "SLAVE", "brokerId": 1}
            async with (
                running_broker(tmp_path / "master", **master_settings) as master,
                running_broker(tmp_path / "slave", **slave_settings) as slave,
            ):
                assert master.metrics_endpoint is not None and slave.metrics_endpoint is not None
                client = RemotingClient()
                try:
                    for i in range(5):
                        await send(client, f"127.0.0.1:{master.port}", "Copied", b"m%d" % i)
                finally:
                    await client.close()
                end = master.store.commitlog_max_offset

                async def lag(broker: Broker, role: str) -> float | None:
                    assert broker.metrics_endpoint is not None
                    samples = (await scrape(broker.metrics_endpoint.url))["rocketmq_replication_lag_bytes"]
                    found = [s.value for s in samples if s.labels["role"] == role]
                    return found[0] if found else None

                async def master_sees_no_lag() -> bool:
                    return await lag(master, "master") == 0

                # Until the slave has it all, the master counts what it lacks; then both say 0.
                await wait_until(
                    lambda: slave.store.commitlog_max_offset >= end, message="the slave caught up"
                )
                await wait_until(master_sees_no_lag, message="the master sees no lag")
                assert await lag(slave, "slave") == 0
                assert slave.metrics_endpoint is not None
                (seen,) = (await scrape(slave.metrics_endpoint.url))["rocketmq_replication_lag_bytes"]
                assert seen.labels["peer"] == f"127.0.0.1:{master.ha_port}"

    run(scenario())


def test_a_scrape_writes_its_text_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writers: list[int] = []

    def recording(registry: Any) -> bytes:
        writers.append(threading.get_ident())
        return generate_latest(registry)

    monkeypatch.setattr(metrics_app_module, "generate_latest", recording)

    async def scenario() -> None:
        async with broker_and_client(tmp_path, **PROM) as (broker, addr, client):
            assert broker.metrics_endpoint is not None
            await send(client, addr, "Written", b"m")
            families = await scrape(broker.metrics_endpoint.url)
            assert value(families["rocketmq_messages_in"], **COMMON, topic="Written") == 1
            assert writers and threading.get_ident() not in writers

    run(scenario())
