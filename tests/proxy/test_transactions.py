"""Transactional messages through the proxy: a half message sent, ended by EndTransaction, or checked back
at a connected producer over its Telemetry stream and ended from there."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc
import pytest
from proxy_support import (
    ProxiedStandalone,
    Stub,
    client_metadata,
    message,
    new_client_id,
    producer_settings,
    start_proxied,
)

from cometmq.client import blocking
from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy import service_pb2 as pb
from secured_servers import write_conf
from waiting import DEFAULT_TIMEOUT_S, wait_until_blocking

# Half messages are checked back one second after they are sent, then every half second.
FAST_CHECKS = {"transactionTimeOut": "1000", "transactionCheckInterval": "500"}


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedStandalone]:
    directory = tmp_path_factory.mktemp("transactions")
    server = start_proxied(directory / "data", write_conf(directory / "broker.conf", **FAST_CHECKS))
    try:
        yield server
    finally:
        server.process.terminate()


def send_half(stub: Stub, topic: str, client_id: str) -> tuple[v2.Message, pb.SendResultEntry]:
    half = message(topic, b"in a transaction", message_type=v2.TRANSACTION)
    response = stub.SendMessage(pb.SendMessageRequest(messages=[half]), metadata=client_metadata(client_id))
    assert response.status.code == v2.OK, response.status
    return half, response.entries[0]


def end(
    stub: Stub, topic: str, entry: pb.SendResultEntry, resolution: int, source: int = v2.SOURCE_CLIENT
) -> pb.EndTransactionResponse:
    request = pb.EndTransactionRequest(
        topic=v2.Resource(name=topic),
        message_id=entry.message_id,
        transaction_id=entry.transaction_id,
        resolution=resolution,  # type: ignore[arg-type]
        source=source,  # type: ignore[arg-type]
    )
    response: pb.EndTransactionResponse = stub.EndTransaction(
        request, metadata=client_metadata(new_client_id())
    )
    return response


def delivered(proxied: ProxiedStandalone, topic: str, message_id: str) -> bool:
    """Whether the committed copy of a message is in its topic."""
    with blocking.AdminClient(proxied.namesrv) as admin:
        return any(record.topic == topic for record in admin.view_message(message_id, topic))


def test_committed_half_message_is_delivered(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic("+message.type=TRANSACTION")
    _, entry = send_half(stub, topic, new_client_id())
    assert entry.transaction_id == entry.message_id  # RocketMQ's brokers answer the UNIQ_KEY
    assert end(stub, topic, entry, v2.COMMIT).status.code == v2.OK
    wait_until_blocking(lambda: delivered(proxied, topic, entry.message_id), message="the committed message")


def test_rolled_back_half_message_is_ended_once(proxied: ProxiedStandalone, stub: Stub) -> None:
    topic = proxied.new_topic("+message.type=TRANSACTION")
    _, entry = send_half(stub, topic, new_client_id())
    assert end(stub, topic, entry, v2.ROLLBACK).status.code == v2.OK
    assert end(stub, topic, entry, v2.COMMIT).status.code == v2.INVALID_TRANSACTION_ID


def test_unknown_transaction_is_invalid_transaction_id(proxied: ProxiedStandalone, stub: Stub) -> None:
    entry = pb.SendResultEntry(message_id="0123", transaction_id="0123")
    response = end(stub, proxied.new_topic(), entry, v2.COMMIT)
    assert response.status.code == v2.INVALID_TRANSACTION_ID
    assert "0123" in response.status.message


def test_transactional_message_to_a_normal_topic_is_refused(proxied: ProxiedStandalone, stub: Stub) -> None:
    half = message(proxied.new_topic(), message_type=v2.TRANSACTION)
    response = stub.SendMessage(
        pb.SendMessageRequest(messages=[half]), metadata=client_metadata(new_client_id())
    )
    assert response.status.code == v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


class TelemetryStream:
    """A producer's Telemetry stream held open: commands go in through :meth:`send`, the proxy's come
    out through :meth:`next` (read by a thread of its own)."""

    def __init__(self, stub: Stub, client_id: str) -> None:
        self._requests: queue.Queue[pb.TelemetryCommand | None] = queue.Queue()
        self._answers: queue.Queue[pb.TelemetryCommand | BaseException] = queue.Queue()
        self._call = stub.Telemetry(self._outgoing(), metadata=client_metadata(client_id))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _outgoing(self) -> Iterator[pb.TelemetryCommand]:
        while (command := self._requests.get()) is not None:
            yield command

    def _read(self) -> None:
        try:
            for answer in self._call:
                self._answers.put(answer)
        except grpc.RpcError as exc:
            self._answers.put(exc)

    def send(self, command: pb.TelemetryCommand) -> None:
        self._requests.put(command)

    def next(self) -> pb.TelemetryCommand:
        answer = self._answers.get(timeout=DEFAULT_TIMEOUT_S)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def close(self) -> None:
        self._requests.put(None)
        self._reader.join(DEFAULT_TIMEOUT_S)


def test_open_transaction_is_checked_back_at_a_connected_producer(
    proxied: ProxiedStandalone, stub: Stub
) -> None:
    topic = proxied.new_topic("+message.type=TRANSACTION")
    client_id = new_client_id()
    stream = TelemetryStream(stub, client_id)
    try:
        stream.send(producer_settings(topic))
        assert stream.next().status.code == v2.OK
        half, entry = send_half(stub, topic, client_id)
        command = stream.next()
        assert command.WhichOneof("command") == "recover_orphaned_transaction_command"
        recover = command.recover_orphaned_transaction_command
        assert recover.transaction_id == entry.transaction_id
        assert recover.message.topic.name == topic
        assert recover.message.system_properties.message_id == half.system_properties.message_id
        assert recover.message.body == b"in a transaction"
        assert recover.message.system_properties.message_type == v2.TRANSACTION
        checked = pb.SendResultEntry(
            message_id=recover.message.system_properties.message_id, transaction_id=recover.transaction_id
        )
        assert end(stub, topic, checked, v2.COMMIT, v2.SOURCE_SERVER_CHECK).status.code == v2.OK
        wait_until_blocking(
            lambda: delivered(proxied, topic, entry.message_id), message="the checked message"
        )
    finally:
        stream.close()


def test_stream_closed_by_the_client_is_answered_to_the_end(proxied: ProxiedStandalone, stub: Stub) -> None:
    stream = TelemetryStream(stub, new_client_id())
    stream.send(producer_settings(proxied.new_topic()))
    stream.close()
    assert stream.next().status.code == v2.OK
