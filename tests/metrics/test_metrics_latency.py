"""The rpc-latency histogram's buckets: RocketMQ 5's bounds in milliseconds, a latency counted in the
first bucket whose bound it does not exceed, and cumulative counts at scrape."""

from __future__ import annotations

from cometmq.metrics import RpcLatency


def test_latencies_fall_in_the_first_bucket_whose_bound_they_do_not_exceed() -> None:
    latency = RpcLatency()
    for seconds in (0.0002, 0.001, 0.004, 0.050, 2.5, 9.0):
        latency(310, 0, seconds)
    latency(310, 1, 0.002)
    family = latency.family(["cluster", "node_type", "node_id"], ["c", "broker", "b"])
    ok = {
        s.labels.get("le", s.name.rpartition("_")[2]): s.value
        for s in family.samples
        if s.labels["response_code"] == "0"
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
    refused = [s for s in family.samples if s.labels["response_code"] == "1" and s.name.endswith("_count")]
    assert [s.value for s in refused] == [1]
    assert {s.labels["request_code"] for s in family.samples} == {"310"}
