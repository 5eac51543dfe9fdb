"""The rpc-latency histogram's buckets: RocketMQ 5's bounds in milliseconds, a latency counted in the
first bucket whose bound it does not exceed, and cumulative counts at scrape; its labels, named as
RocketMQ names the codes, and bounded however many codes requests and handlers use."""

from __future__ import annotations

from cometmq.metrics import RpcLatency
from cometmq.protocol import RequestCode, ResponseCode


def test_latencies_fall_in_the_first_bucket_whose_bound_they_do_not_exceed() -> None:
    latency = RpcLatency()
    for seconds in (0.0002, 0.001, 0.004, 0.050, 2.5, 9.0):
        latency(310, 0, seconds, False, "success")
    latency(310, 1, 0.002, False, "success")
    family = latency.family(["cluster", "node_type", "node_id"], ["c", "broker", "b"])
    ok = {
        s.labels.get("le", s.name.rpartition("_")[2]): s.value
        for s in family.samples
        if s.labels["response_code"] == "success"
    }
    assert ok == {
        "1.0": 2,  # 0.2 ms and exactly 1 ms
        "3.0": 2,
        "5.0": 3,
        "7.0": 3,
        "10.0": 3,
        "100.0": 4,
        "1000.0": 4,
        "2000.0": 4,
        "3000.0": 5,
        "+Inf": 6,
        "count": 6,
        "sum": 0.2 + 1 + 4 + 50 + 2500 + 9000,
    } | {"sum": ok["sum"]}
    assert abs(ok["sum"] - (0.2 + 1 + 4 + 50 + 2500 + 9000)) < 1e-6
    refused = [
        s for s in family.samples if s.labels["response_code"] == "system_error" and s.name.endswith("_count")
    ]
    assert [s.value for s in refused] == [1]
    assert {s.labels["request_code"] for s in family.samples} == {"send_message_v2"}
    assert {s.labels["protocol_type"] for s in family.samples} == {"remoting"}


def test_codes_not_served_or_not_known_share_one_row_each() -> None:
    latency = RpcLatency()
    for code in range(100_000, 105_000):  # a client making codes up: the Dispatcher serves none
        latency(code, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 0.001, False, "success")
    for code in range(1000, 1500):  # a handler answering codes RocketMQ does not have
        latency(RequestCode.PULL_MESSAGE, 50_000 + code, 0.001, False, "success")
    latency(RequestCode.PULL_MESSAGE, ResponseCode.SUCCESS, 0.001, True, "success")
    latency(RequestCode.PULL_MESSAGE, ResponseCode.SUCCESS, 0.001, False, "oneway")
    family = latency.family(["cluster", "node_type", "node_id"], ["c", "broker", "b"])
    counts = {
        tuple(s.labels[k] for k in ("request_code", "response_code", "is_long_polling", "result")): s.value
        for s in family.samples
        if s.name.endswith("_count")
    }
    assert counts == {
        ("unknown", "request_code_not_supported", "false", "success"): 5000,
        ("pull_message", "unknown", "false", "success"): 500,
        ("pull_message", "success", "true", "success"): 1,
        ("pull_message", "success", "false", "oneway"): 1,
    }
