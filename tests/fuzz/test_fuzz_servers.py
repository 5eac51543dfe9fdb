"""A name server and a broker, each its own process, keep serving through 20 000 fuzzed inputs.

The inputs (tests/fuzz/fuzzing.py) are a plausible request for every code of each server's dispatch
table and the frames the official C++ client sent, mutated: bit flips, truncation, absurd lengths,
header fields of the wrong type, deep nesting, invalid UTF-8 and lone surrogates, huge counts, zlib
bombs. Each input is checked (the server answers on the connection or closes it, no Python exception
text in a remark, no traceback in its log), and every 500 inputs a new connection must be served and
the resident memory stay under a bound. A failure names its seed and input index;
``bench/fuzz_servers.py --seed S --start I --count 1 --only SERVER`` sends that input alone.
COMETMQ_FUZZ_SEED runs the suite on another seed. What the fuzzing found is kept here too, each as a
test of its own.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzzing import PROBE_CODE, PROBE_OPAQUE, Connection, Report, Target, fuzz, servers

from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.codec import encode_bytes
from cometmq.protocol.codes import RESPONSE_FLAG
from waiting import wait_until_blocking

SEED = int(os.environ.get("COMETMQ_FUZZ_SEED", "20261128"))
# A server's resident memory after each batch: ~50 MiB at rest; a zlib bomb or a 4 MiB body may pass
# through, none may stay.
RSS_BOUND_KIB = 256 * 1024


@pytest.fixture(scope="module")
def fuzzed_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Target, Target]]:
    with servers(tmp_path_factory.mktemp("fuzz")) as pair:
        yield pair


def served_codes(target: Target) -> set[int]:
    """The request codes *target* does not answer with REQUEST_CODE_NOT_SUPPORTED."""
    conn = Connection(target.address)
    try:
        codes = {int(code) for code in RequestCode} | {PROBE_CODE}
        return {
            code
            for code in codes
            if conn.call(RemotingCommand(code=code)).code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        }
    finally:
        conn.close()


@pytest.mark.parametrize("server", ["namesrv", "broker"])
def test_every_request_code_a_server_serves_has_a_seed(
    fuzzed_servers: tuple[Target, Target], server: str
) -> None:
    target = dict(zip(("namesrv", "broker"), fuzzed_servers, strict=True))[server]
    built = {seed.code for seed in target.seeds if seed.origin == "built"}
    assert served_codes(target) == built


def fuzz_and_report(target: Target, count: int) -> Report:
    report = fuzz(target, SEED, count, rss_bound_kib=RSS_BOUND_KIB)
    assert report.inputs == count, report.describe(target.name)
    assert not report.failures, report.describe(target.name)
    return report


def test_broker_keeps_serving_through_12000_fuzzed_inputs(fuzzed_servers: tuple[Target, Target]) -> None:
    report = fuzz_and_report(fuzzed_servers[1], 12_000)
    # Some inputs must have been refused by closing the connection: the framing mutations did reach it.
    assert report.closed_by_server > 0


def test_namesrv_keeps_serving_through_8000_fuzzed_inputs(fuzzed_servers: tuple[Target, Target]) -> None:
    report = fuzz_and_report(fuzzed_servers[0], 8_000)
    assert report.closed_by_server > 0


def test_a_broker_topic_holding_a_lone_surrogate_is_still_listed_and_registered(tmp_path: Path) -> None:
    """A topic filter type read from a ``\\ud800`` escape: every answer and registration that includes
    the topic's config is still written (the surrogate escaped again), or the topic is refused."""
    with servers(tmp_path) as (namesrv, broker):
        conn = Connection(broker.address)
        try:
            header = (
                b'{"code":17,"extFields":{"topic":"Surrogate","defaultTopic":"TBW102","readQueueNums":"1",'
                b'"writeQueueNums":"1","perm":"6","topicFilterType":"SINGLE_TAG\\ud800","order":"false"},'
                b'"flag":0,"language":"JAVA","opaque":1,"version":409}'
            )
            created = conn.call_raw(header)
            listed = conn.call(RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG))
            assert listed.code == ResponseCode.SUCCESS, listed.remark
            assert (b"Surrogate" in bytes(listed.body)) == (created.code == ResponseCode.SUCCESS)
        finally:
            conn.close()
        if created.code == ResponseCode.SUCCESS:
            routes = Connection(namesrv.address)
            try:
                route = RemotingCommand(
                    code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "Surrogate"}
                )
                wait_until_blocking(
                    lambda: routes.call(route).code == ResponseCode.SUCCESS, message="the topic's route"
                )
            finally:
                routes.close()
        assert "Traceback" not in broker.log_path.read_text()


def test_a_name_a_client_sends_cannot_write_a_line_of_its_own_into_the_log(
    fuzzed_servers: tuple[Target, Target],
) -> None:
    namesrv = fuzzed_servers[0]
    forged = "2026-01-01 00:00:00,000 ERROR   cometmq.namesrv: forged"
    conn = Connection(namesrv.address)
    try:
        wipe = RemotingCommand(
            code=RequestCode.WIPE_WRITE_PERM_OF_BROKER, ext_fields={"brokerName": f"evil\n{forged}\r"}
        )
        assert conn.call(wipe).code == ResponseCode.SUCCESS
    finally:
        conn.close()

    def logged() -> str | None:
        text = namesrv.log_path.read_text()
        return text if "of broker evil" in text else None

    log = wait_until_blocking(logged, message="the wipe's log line")
    assert forged not in log.splitlines()
    assert f"of broker evil\\x0a{forged}\\x0d on 0 topics" in log


def test_the_fuzzers_connection_keeps_answers_that_arrive_in_one_read_with_the_one_awaited() -> None:
    """A request answered after the probe sent behind it (a reset waits for a file write) may arrive in
    the same read as the probe's answer: waiting for the probe must not lose it."""
    late = RemotingCommand(code=ResponseCode.SUCCESS, opaque=7, flag=RESPONSE_FLAG)
    probe = RemotingCommand(code=ResponseCode.SUCCESS, opaque=PROBE_OPAQUE, flag=RESPONSE_FLAG)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        conn = Connection(listener.getsockname())
        peer, _ = listener.accept()
        with peer:
            peer.sendall(encode_bytes(probe) + encode_bytes(late))  # one write: most likely one read
            assert [c.opaque for c in conn.until(lambda c: c.opaque == PROBE_OPAQUE)][-1] == PROBE_OPAQUE
            assert [c.opaque for c in conn.until(lambda c: c.opaque == 7)] == [7]
        conn.close()
