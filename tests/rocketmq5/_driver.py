#!/usr/bin/env python3
"""Drive the official RocketMQ 5.x Python client (``rocketmq-python-client``) in a process of its own.

Run with the interpreter of ``.venv-rocketmq5`` (scripts/_rocketmq5.sh makes it; the client's top-level
package ``rocketmq`` is also the C++ 4.x client's, in .venv), by tests/rocketmq5/client5.py::

    .venv-rocketmq5/bin/python tests/rocketmq5/_driver.py <scenario> --endpoints 127.0.0.1:8081 [options]

Scenarios: ``produce``, ``transaction``, ``simple-consume``, ``push-consume``, ``bench-produce``,
``bench-consume`` (``--help`` on each).

Contract: every line on stdout is one JSON object with an ``event``: ``started`` once the client is up,
then what the scenario does (``sent``, ``received``, ``acked``, ``consumed``, ``checked``, ``error``...),
then ``done`` with a summary, the last line. A failure the scenario cannot go on from is an ``error``
event with the exception's type, text and the client's status code, then ``done`` with ``"ok": false``.
The client logs into ``$HOME/logs/rocketmq_python``. The process ends with ``os._exit`` once ``done`` is
printed: the client's threads are not all daemons.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

_print_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


def error_fields(exc: BaseException) -> dict[str, Any]:
    """An exception as an event's fields: its type, text, status code and the line that raised it."""
    code = getattr(exc, "code", None)  # the client's v2.Code; a gRPC error's code() is its StatusCode
    if callable(code):
        code = code().name
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None
    return {"type": type(exc).__name__, "message": str(exc), "code": code, "where": where}


def finish(ok: bool, **summary: Any) -> None:
    emit("done", ok=ok, **summary)
    os._exit(0 if ok else 1)


def configuration(args: argparse.Namespace) -> ClientConfiguration:
    return ClientConfiguration(
        args.endpoints, Credentials(args.access_key, args.secret_key), request_timeout=args.request_timeout
    )


def message_fields(message: Any) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "topic": message.topic,
        "tag": message.tag,
        "keys": sorted(message.keys or []),
        "message_group": message.message_group,
        "delivery_timestamp": message.delivery_timestamp,
        "delivery_attempt": message.delivery_attempt,
        "born_timestamp": message.born_timestamp,
        "properties": dict(message.properties or {}),
        "body": message.body.decode("utf-8", errors="replace"),
    }


def new_message(args: argparse.Namespace, index: int) -> Message:
    message = Message()
    message.topic = args.topic
    message.body = f"{args.body_prefix}{index}".encode().ljust(args.body_size, b".")
    if args.tag:
        message.tag = args.tag
    if args.keys_prefix:
        message.keys = f"{args.keys_prefix}{index}"
    if args.message_groups:
        message.message_group = f"group-{index % args.message_groups}"
    # 5.1.2 sends the number given as the seconds of the delivery timestamp: its example gives seconds,
    # its own tests milliseconds (a received message's delivery_timestamp is in milliseconds).
    if args.delay_s is not None:
        message.delivery_timestamp = int(time.time()) + args.delay_s
    if args.delay_ms is not None:
        message.delivery_timestamp = int(time.time() * 1000) + args.delay_ms
    for prop in args.property:
        key, _, value = prop.partition("=")
        message.add_property(key, value)
    return message


def started(client: Any) -> None:
    client.startup()
    emit("started", client_id=client.client_id)


# --------------------------------------------------------------------------------------------- producers


def produce(args: argparse.Namespace) -> None:
    producer = Producer(configuration(args), (args.topic,), tls_enable=args.tls)
    started(producer)
    sent = 0
    try:
        for index in range(args.count):
            message = new_message(args, index)
            receipt = producer.send(message)
            # The client's MessageQueue shows its broker and queue id only as text: broker.topic.queue.
            broker, _, queue_id = str(receipt.message_queue).partition(".")
            emit("sent", index=index, message_id=receipt.message_id, broker=broker,
                 queue_id=int(queue_id.rpartition(".")[2]), offset=receipt.offset)  # fmt: skip
            sent += 1
    except Exception as exc:
        emit("error", index=sent, **error_fields(exc))
        producer.shutdown()
        finish(False, sent=sent)
    producer.shutdown()
    finish(True, sent=sent)


class AnsweringChecker(TransactionChecker):
    """Answers every check with the resolution it was made with, and says so."""

    def __init__(self, answer: TransactionResolution) -> None:
        self.answer = answer
        self.checked = 0

    def check(self, message: Message) -> TransactionResolution:
        emit("checked", message_id=message.message_id, answer=TransactionResolution.Name(self.answer))
        self.checked += 1
        return self.answer


def transaction(args: argparse.Namespace) -> None:
    """Half messages, each ended by --end (commit or rollback) or left open (none) for the broker's check;
    the checker answers --check. With --end none, the scenario waits for --checks checks."""
    checker = AnsweringChecker(getattr(TransactionResolution, args.check.upper()))
    producer = Producer(configuration(args), (args.topic,), checker, tls_enable=args.tls)
    started(producer)
    try:
        for index in range(args.count):
            half = producer.begin_transaction()
            receipt = producer.send(new_message(args, index), half)
            emit("sent", index=index, message_id=receipt.message_id, transaction_id=receipt.transaction_id)
            if args.end == "commit":
                half.commit()
            elif args.end == "rollback":
                half.rollback()
            if args.end != "none":
                emit("ended", index=index, message_id=receipt.message_id, resolution=args.end)
        wait_for(lambda: args.end != "none" or checker.checked >= args.checks, args.timeout)
    except Exception as exc:
        emit("error", **error_fields(exc))
        producer.shutdown()
        finish(False, checked=checker.checked)
    producer.shutdown()
    finish(args.end != "none" or checker.checked >= args.checks, checked=checker.checked)


# --------------------------------------------------------------------------------------------- consumers


def filter_expression(args: argparse.Namespace) -> FilterExpression:
    return FilterExpression(args.tag) if args.tag else FilterExpression()


def simple_consume(args: argparse.Namespace) -> None:
    """Receive until --until-acked messages are acked (or --until-received deliveries, counting
    redeliveries), then stop. A message is acked from its --ack-from-attempt-th delivery on (0: never), if
    it has the tag --ack-tag when that is given; with --change-invisible S, a delivery not acked has its
    invisible duration changed to S seconds."""
    consumer = SimpleConsumer(
        configuration(args),
        args.group,
        {args.topic: filter_expression(args)},
        await_duration=args.await_s,
        tls_enable=args.tls,
    )
    started(consumer)
    acked = received = 0
    deadline = time.monotonic() + args.timeout

    def enough() -> bool:
        return (args.until_acked and acked >= args.until_acked) or (
            args.until_received and received >= args.until_received
        )

    while not enough() and time.monotonic() < deadline:
        try:
            messages = consumer.receive(args.max_messages, args.invisible)
        except Exception as exc:  # the server restarting, say: the next receive tries again
            fields = error_fields(exc)
            if fields["code"] == "UNIMPLEMENTED":  # a proxy that does not serve ReceiveMessage never will
                emit("error", **fields)
                break
            emit("receive-error", **fields)
            time.sleep(0.2)
            continue
        for message in messages:
            received += 1
            emit("received", received_at=int(time.time() * 1000), **message_fields(message))
            attempt = message.delivery_attempt
            acking = args.ack_from_attempt and attempt >= args.ack_from_attempt
            try:
                if acking and args.ack_tag in (None, message.tag):
                    consumer.ack(message)
                    acked += 1
                    emit("acked", message_id=message.message_id, delivery_attempt=attempt)
                elif args.change_invisible:
                    consumer.change_invisible_duration(message, args.change_invisible)
                    emit("changed", message_id=message.message_id, invisible=args.change_invisible)
            except Exception as exc:
                emit("settle-error", message_id=message.message_id, **error_fields(exc))
    consumer.shutdown()
    finish(bool(enough()), acked=acked, received=received)


class RecordingListener(MessageListener):
    """Fails the first --fail-calls calls for each message, then consumes it; reports each call. Calls are
    counted here: a FIFO consumer retries a failed message itself, with the delivery attempt unchanged."""

    def __init__(self, fail_calls: int) -> None:
        self.fail_calls = fail_calls
        self.calls: dict[str, int] = {}
        self.consumed = 0
        self.lock = threading.Lock()

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            call = self.calls[message.message_id] = self.calls.get(message.message_id, 0) + 1
        fields = message_fields(message)
        if call <= self.fail_calls:
            emit("failed", call=call, **fields)
            return ConsumeResult.FAILURE
        emit("consumed", call=call, thread=threading.current_thread().name, **fields)
        with self.lock:
            self.consumed += 1
        return ConsumeResult.SUCCESS


def push_consume(args: argparse.Namespace) -> None:
    listener = RecordingListener(args.fail_calls)
    consumer = PushConsumer(
        configuration(args),
        args.group,
        listener,
        {args.topic: filter_expression(args)},
        consumption_thread_count=args.threads,
        tls_enable=args.tls,
    )
    started(consumer)
    wait_for(lambda: listener.consumed >= args.until_consumed, args.timeout)
    consumer.shutdown()
    finish(listener.consumed >= args.until_consumed, consumed=listener.consumed)


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


# --------------------------------------------------------------------------------------------- benchmarks


def bench_produce(args: argparse.Namespace) -> None:
    """--count sends of --body-size bytes, --inflight at a time (send_async); the rate in ``done``, timed
    from the ``clock`` event."""
    producer = Producer(configuration(args), (args.topic,), tls_enable=args.tls)
    started(producer)
    window = threading.Semaphore(args.inflight)
    failures: list[str] = []
    all_done = threading.Event()
    remaining = args.count
    lock = threading.Lock()

    def on_done(future: Any) -> None:
        nonlocal remaining
        if future.exception() is not None:
            failures.append(str(future.exception()))
        window.release()
        with lock:
            remaining -= 1
            if remaining == 0:
                all_done.set()

    body = b"x" * args.body_size
    emit("clock")
    start = time.perf_counter()
    for _ in range(args.count):
        window.acquire()
        message = Message()
        message.topic = args.topic
        message.body = body
        producer.send_async(message).add_done_callback(on_done)
    all_done.wait(args.timeout)
    elapsed = time.perf_counter() - start
    producer.shutdown()
    finish(not failures and all_done.is_set(), sent=args.count - remaining, failures=failures[:3],
           elapsed=elapsed, rate=(args.count - remaining) / elapsed)  # fmt: skip


def bench_consume(args: argparse.Namespace) -> None:
    """Receive and ack until --count messages are acked; the rate in ``done``, timed from the ``clock``
    event, when the first messages have been received."""
    consumer = SimpleConsumer(
        configuration(args),
        args.group,
        {args.topic: FilterExpression()},
        await_duration=5,
        tls_enable=args.tls,
    )
    started(consumer)
    acked = 0
    start: float | None = None
    deadline = time.monotonic() + args.timeout
    while acked < args.count and time.monotonic() < deadline:
        messages = consumer.receive(args.max_messages, 30)
        if messages and start is None:
            emit("clock")
            start = time.perf_counter()
        for message in messages:
            consumer.ack(message)
            acked += 1
    elapsed = time.perf_counter() - (start or time.perf_counter())
    consumer.shutdown()
    finish(acked >= args.count, acked=acked, elapsed=elapsed, rate=acked / elapsed if elapsed else 0.0)


# --------------------------------------------------------------------------------------------- command line


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    scenarios = top.add_subparsers(dest="scenario", required=True)

    def scenario(name: str, run: Callable[[argparse.Namespace], None], text: str) -> argparse.ArgumentParser:
        sub = scenarios.add_parser(name, help=text)
        sub.set_defaults(run=run)
        sub.add_argument("--endpoints", required=True, help="the proxy's host:port")
        sub.add_argument("--topic", required=True)
        sub.add_argument("--access-key", default="")
        sub.add_argument("--secret-key", default="")
        sub.add_argument("--tls", action="store_true", help="TLS (trusting GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)")
        sub.add_argument("--request-timeout", type=int, default=10, help="seconds per call")
        sub.add_argument("--timeout", type=float, default=60.0, help="seconds for the whole scenario")
        return sub

    def message_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--count", type=int, default=1)
        sub.add_argument("--body-prefix", default="msg-", help="body = <prefix><index>")
        sub.add_argument("--body-size", type=int, default=0, help="pad bodies with dots to this size")
        sub.add_argument("--tag")
        sub.add_argument("--keys-prefix", help="one key per message: <prefix><index>")
        sub.add_argument("--message-groups", type=int, default=0,
                         help="FIFO: message i in message group group-<i mod N>")  # fmt: skip
        sub.add_argument("--delay-s", type=int, help="delivery timestamp = now + this, in seconds")
        sub.add_argument("--delay-ms", type=int, help="delivery timestamp = now + this, in milliseconds")
        sub.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")

    message_options(scenario("produce", produce, "send --count messages, one at a time"))
    tx = scenario("transaction", transaction, "transactional sends")
    message_options(tx)
    tx.add_argument("--end", choices=["commit", "rollback", "none"], required=True)
    tx.add_argument("--check", choices=["commit", "rollback"], default="commit", help="the checker's answer")
    tx.add_argument("--checks", type=int, default=1, help="with --end none: checks to wait for")

    for name, run, text in (
        ("simple-consume", simple_consume, "SimpleConsumer: receive, ack, change invisible duration"),
        ("push-consume", push_consume, "PushConsumer until --until-consumed messages are consumed"),
    ):
        sub = scenario(name, run, text)
        sub.add_argument("--group", required=True)
        sub.add_argument("--tag", help="tag filter expression (default: every message)")
    simple = scenarios.choices["simple-consume"]
    simple.add_argument("--max-messages", type=int, default=16)
    simple.add_argument("--invisible", type=int, default=30, help="invisible duration, seconds")
    simple.add_argument("--await-s", type=int, default=5, help="long polling, seconds")
    simple.add_argument("--ack-from-attempt", type=int, default=1, help="0: never ack")
    simple.add_argument("--ack-tag", help="ack only messages with this tag")
    simple.add_argument("--change-invisible", type=int, default=0, help="seconds, for a delivery not acked")
    simple.add_argument("--until-acked", type=int, default=0)
    simple.add_argument("--until-received", type=int, default=0)
    push = scenarios.choices["push-consume"]
    push.add_argument("--until-consumed", type=int, required=True)
    push.add_argument(
        "--fail-calls", type=int, default=0, help="answer FAILURE to each message's first N calls"
    )
    push.add_argument("--threads", type=int, default=4)

    bench_p = scenario("bench-produce", bench_produce, "send rate")
    bench_p.add_argument("--count", type=int, default=1000)
    bench_p.add_argument("--body-size", type=int, default=128)
    bench_p.add_argument("--inflight", type=int, default=32, help="sends in flight at a time")
    bench_c = scenario("bench-consume", bench_consume, "receive + ack rate")
    bench_c.add_argument("--group", required=True)
    bench_c.add_argument("--count", type=int, default=1000)
    bench_c.add_argument("--max-messages", type=int, default=32)
    return top


def main() -> None:
    args = parser().parse_args()
    try:
        args.run(args)
    except Exception as exc:
        emit("error", **error_fields(exc))
        finish(False)


if __name__ == "__main__":
    main()
