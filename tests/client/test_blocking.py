"""The blocking facade (cometmq.client.blocking) from plain threads, against a real standalone server:
one shared loop thread that goes away with the last client, and sockets closed by close() or GC."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import Callable

import pytest
from client_support import send_to_queue

from cometmq.client import blocking
from cometmq.client.message import Message, ReceivedMessage
from processes import StandaloneServer


def send(server: StandaloneServer, topic: str, queue_id: int, bodies: list[bytes]) -> None:
    asyncio.run(send_to_queue(server, topic, queue_id, bodies))


def wait_for(condition: Callable[[], bool], message: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{message} not reached within {timeout} s"
        time.sleep(0.05)


def open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return count


def test_clients_work_from_a_plain_thread_on_one_loop_thread_that_stops_with_the_last(
    server: StandaloneServer,
) -> None:
    threads_before = threading.active_count()
    with blocking.AdminClient(server.namesrv) as admin:
        admin.create_topic("BlkPlain", 2)
        assert "BlkPlain" in admin.topic_list()
        loop_thread = blocking.loop_thread()
        assert loop_thread is not None and loop_thread.name == "cometmq-client-loop" and loop_thread.daemon
        send(server, "BlkPlain", 0, [b"b%d" % i for i in range(30)])
        with blocking.LitePullConsumer("GID_blk_plain", server.namesrv, consume_from="first") as consumer:
            assert blocking.loop_thread() is loop_thread  # shared, not one per client
            queues = consumer.fetch_queues("BlkPlain")
            consumer.assign(queues)
            got: list[ReceivedMessage] = []
            deadline = time.monotonic() + 30
            while len(got) < 30:
                assert time.monotonic() < deadline
                got += consumer.poll(1.0)
            assert [m.body for m in got] == [b"b%d" % i for i in range(30)]
            assert consumer.position(queues[0]) == 30
            batches = list(consumer.read(queues[0], 5, 25, max_batch=4))
            assert [m.queue_offset for batch in batches for m in batch] == list(range(5, 25))
        assert blocking.loop_thread() is loop_thread  # the admin client still holds it
    assert blocking.loop_thread() is None
    assert not loop_thread.is_alive()
    assert threading.active_count() == threads_before


def test_two_threads_use_blocking_clients_at_once(server: StandaloneServer) -> None:
    threads_before = threading.active_count()
    with blocking.AdminClient(server.namesrv) as admin:
        admin.create_topic("BlkTwo", 2)
    send(server, "BlkTwo", 0, [b"zero-%d" % i for i in range(40)])
    send(server, "BlkTwo", 1, [b"one-%d" % i for i in range(40)])
    results: dict[int, list[bytes]] = {}
    errors: list[BaseException] = []
    shared = blocking.LitePullConsumer("GID_blk_two", server.namesrv)
    shared.start()
    queues = shared.fetch_queues("BlkTwo")

    def reader(qid: int) -> None:
        try:
            # Both threads call the same client at once, and each also has a client of its own.
            bodies = [m.body for batch in shared.read(queues[qid], 0, 40, max_batch=7) for m in batch]
            with blocking.LitePullConsumer(f"GID_blk_two_{qid}", server.namesrv) as own:
                bodies += [m.body for batch in own.read(queues[qid], 30, 40) for m in batch]
            results[qid] = bodies
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(qid,)) for qid in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    shared.close()
    assert not errors, errors
    for qid, name in ((0, b"zero"), (1, b"one")):
        expected = [b"%s-%d" % (name, i) for i in range(40)] + [b"%s-%d" % (name, i) for i in range(30, 40)]
        assert results[qid] == expected
    assert blocking.loop_thread() is None
    # The consumer's idle worker threads leave right after close() (it does not wait for them).
    wait_for(lambda: threading.active_count() == threads_before, "every client thread gone", 10)


def test_a_garbage_collected_client_closes_its_sockets_and_the_loop_thread(server: StandaloneServer) -> None:
    with blocking.AdminClient(server.namesrv) as admin:
        admin.create_topic("BlkGc", 1)
    gc.collect()
    sockets_before = open_sockets()
    threads_before = threading.active_count()
    consumer = blocking.LitePullConsumer("GID_blk_gc", server.namesrv)
    consumer.start()
    (queue,) = consumer.fetch_queues("BlkGc")
    assert consumer.end_offset(queue) == 0
    assert open_sockets() > sockets_before  # name server and broker connections
    del consumer
    gc.collect()
    wait_for(lambda: open_sockets() == sockets_before, "the collected client's sockets closing")
    assert blocking.loop_thread() is None
    # The consumer's idle worker threads leave right after close() (it does not wait for them).
    wait_for(lambda: threading.active_count() == threads_before, "every client thread gone", 10)


def test_a_closed_client_refuses_calls(server: StandaloneServer) -> None:
    admin = blocking.AdminClient(server.namesrv)
    admin.close()
    assert admin.closed
    with pytest.raises(RuntimeError, match="closed"):
        admin.topic_list()


def test_blocking_producer_and_push_consumer_with_a_plain_listener_in_a_worker_thread(
    server: StandaloneServer,
) -> None:
    threads_before = threading.active_count()
    with blocking.AdminClient(server.namesrv) as admin:
        admin.create_topic("BlkPush", 2)
    received: list[bytes] = []
    listener_threads: set[str] = set()
    lock = threading.Lock()

    def listener(messages: list[ReceivedMessage]) -> None:
        with lock:
            received.extend(m.body for m in messages)
            listener_threads.add(threading.current_thread().name)

    consumer = blocking.PushConsumer("GID_blk_push", server.namesrv, consume_from="first")
    consumer.subscribe("BlkPush", "*")
    consumer.listen(listener)
    consumer.start()
    try:
        with blocking.Producer("PID_blk_push", server.namesrv) as producer:
            for i in range(20):
                result = producer.send(Message("BlkPush", b"push-%d" % i))
                assert result.queue.topic == "BlkPush"
        wait_for(lambda: len(received) >= 20, "every message reaching the listener")
    finally:
        consumer.close()
    assert sorted(received) == sorted(b"push-%d" % i for i in range(20))
    assert "cometmq-client-loop" not in listener_threads
    assert blocking.loop_thread() is None
    # The consumer's idle worker threads leave right after close() (it does not wait for them).
    wait_for(lambda: threading.active_count() == threads_before, "every client thread gone", 10)
