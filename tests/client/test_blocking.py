"""The blocking facade (cometmq.client.blocking) from plain threads, against a real standalone server:
one shared loop thread that goes away with the last client, and sockets closed by close() or GC."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import pytest
from client_support import DROP, SILENT, ScriptedBroker, open_sockets, scripted, send_to_queue

from busy_polling import patch_in_this_thread, record_direct_reads
from cometmq.client import blocking
from cometmq.client._direct import _poll_into
from cometmq.client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from cometmq.errors import BrokerError, ClientStateError, RemotingTimeoutError
from cometmq.protocol import ResponseCode as Code
from cometmq.remoting import PollWindow
from processes import StandaloneServer
from waiting import wait_until_blocking

T = TypeVar("T")


def send(server: StandaloneServer, topic: str, queue_id: int, bodies: list[bytes]) -> None:
    asyncio.run(send_to_queue(server, topic, queue_id, bodies))


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

            def polled() -> bool:
                got.extend(consumer.poll(1.0))
                return len(got) >= 30

            wait_until_blocking(polled, message="30 messages polled")
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
    wait_until_blocking(
        lambda: threading.active_count() == threads_before, message="every client thread gone"
    )


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
    wait_until_blocking(
        lambda: open_sockets() <= sockets_before, message="the collected client's sockets closing"
    )
    assert blocking.loop_thread() is None
    # The consumer's idle worker threads leave right after close() (it does not wait for them).
    wait_until_blocking(
        lambda: threading.active_count() == threads_before, message="every client thread gone"
    )


def test_a_closed_client_refuses_calls(server: StandaloneServer) -> None:
    admin = blocking.AdminClient(server.namesrv)
    admin.close()
    assert admin.closed
    with pytest.raises(ClientStateError, match=r"^this blocking AdminClient is closed: make a new one"):
        admin.topic_list()


class ThreadRecorder:
    """A stand-in asyncio client (named so): where a real client's property runs cannot be seen from
    outside, so this one's property says which thread computed it."""

    @property
    def computed_on(self) -> str:
        return threading.current_thread().name

    async def close(self) -> None:
        pass


class BlockingThreadRecorder(blocking._BlockingClient):
    _target = f"{__name__}:ThreadRecorder"


def test_a_property_is_computed_on_the_loop_while_open_and_on_the_caller_once_closed() -> None:
    # On the loop, a property cannot see state the loop is changing half-way (a consumer's queues).
    recorder = BlockingThreadRecorder()
    assert recorder.computed_on == blocking.LOOP_THREAD_NAME
    recorder.close()  # the loop thread is gone now: the property is read where it is asked
    assert recorder.computed_on == threading.current_thread().name


def test_a_blocking_call_from_the_loop_thread_raises_instead_of_waiting_for_itself(
    server: StandaloneServer,
) -> None:
    with blocking.AdminClient(server.namesrv) as admin:
        admin.create_topic("BlkOwnLoop", 1)
    seen: list[object] = []
    done = threading.Event()
    # Not a ``with`` block: if a call did wait for its own loop, closing would wait for it too, and the
    # test would hang instead of failing.
    producer = blocking.Producer("PID_blk_own_loop", server.namesrv)
    producer.start()
    client_id = producer.client_id

    def on_sent(result: SendResult | BaseException) -> None:  # runs on the loop thread
        try:
            for call in (lambda: producer.send(Message("BlkOwnLoop", b"inner")), producer.start):
                try:
                    call()
                except RuntimeError as exc:
                    seen.append(str(exc))
            seen.append(producer.client_id)  # a property is read in place there, not waited for
        finally:  # a failure above shows in the assert below, not as a 30 s wait
            done.set()

    producer.send_with_callback(Message("BlkOwnLoop", b"outer"), on_sent)
    assert done.wait(30), "the callback did not finish: a call waited for its own loop"
    producer.close()
    own_loop = "a blocking CometMQ client was called from its own event loop thread"
    assert seen == [own_loop, own_loop, client_id]


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
        wait_until_blocking(lambda: len(received) >= 20, message="every message reaching the listener")
        # The only member of its group reads both queues (and its retry topic's).
        assert {q.queue_id for q in consumer.assigned_queues if q.topic == "BlkPush"} == {0, 1}
    finally:
        consumer.close()
    assert sorted(received) == sorted(b"push-%d" % i for i in range(20))
    assert "cometmq-client-loop" not in listener_threads
    assert blocking.loop_thread() is None
    # The consumer's idle worker threads leave right after close() (it does not wait for them).
    wait_until_blocking(
        lambda: threading.active_count() == threads_before, message="every client thread gone"
    )


def test_breaking_out_of_a_blocking_for_loop_commits_the_message_in_hand(server: StandaloneServer) -> None:
    with blocking.AdminClient(server.namesrv) as admin:
        admin.create_topic("BlkBreak", 1)
    send(server, "BlkBreak", 0, [b"brk-%d" % i for i in range(10)])

    def consume_until(last: bytes | None) -> list[bytes]:
        """The bodies a member of the group gets up to ``last`` (or just one), breaking out there."""
        consumer = blocking.PushConsumer("GID_blk_break", server.namesrv, consume_from="first")
        consumer.subscribe("BlkBreak")
        got: list[bytes] = []
        with consumer:
            for message in consumer:
                got.append(message.body)
                if last is None or message.body == last:
                    break
        return got

    assert consume_until(b"brk-4") == [b"brk-%d" % i for i in range(5)]
    # The group resumes right after the message the loop broke at.
    assert consume_until(None) == [b"brk-5"]


# ---------------------------------------------------------------------------------------------
# blocking sends, made on the calling thread


@contextmanager
def scripted_in_thread(script: list[int]) -> Iterator[tuple[str, ScriptedBroker]]:
    """The scripted stand-in broker and its name server on an event loop of their own thread, so the
    test's thread is free to make blocking calls."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    context = scripted(script)
    try:
        started = asyncio.run_coroutine_threadsafe(context.__aenter__(), loop).result(30)
        try:
            yield started
        finally:  # a failing test too: stop the stand-ins before their loop
            asyncio.run_coroutine_threadsafe(context.__aexit__(None, None, None), loop).result(30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def in_thread(call: Callable[[], T], timeout: float = 30.0) -> T:
    """``call()`` in another thread: its result, or a failure if it has not returned in ``timeout``."""
    outcome: list[T] = []
    thread = threading.Thread(target=lambda: outcome.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert outcome, f"the call has not returned within {timeout} s"
    return outcome[0]


def test_a_blocking_send_is_made_and_answered_on_the_calling_thread(server: StandaloneServer) -> None:
    with blocking.AdminClient(server.namesrv) as admin:
        admin.create_topic("BlkDirect", 2)

    def last_digit(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
        return queues[int(key[-1]) % len(queues)]  # "order-7": queue 1 (Java's hash would pick 0)

    with blocking.Producer("PID_blk_direct", server.namesrv, queue_selector=last_digit) as producer:
        producer.send(Message("BlkDirect", b"route"))  # the loop looks the route up
        # Stall the loop thread: a send that needed it would wait for it.
        stalled, release = threading.Event(), threading.Event()
        producer._loop.call_soon_threadsafe(lambda: (stalled.set(), release.wait(60)))
        assert stalled.wait(30)
        try:
            single = in_thread(lambda: producer.send(Message("BlkDirect", b"alone", keys="k1")))
            batch = in_thread(
                lambda: producer.send_batch([Message("BlkDirect", b"b%d" % i) for i in range(3)])
            )
            ordered = [
                in_thread(lambda i=i: producer.send(Message("BlkDirect", b"o%d" % i), sharding_key="order-7"))
                for i in range(4)
            ]
        finally:
            release.set()
    assert isinstance(single, SendResult) and single.status is SendStatus.SEND_OK
    assert isinstance(batch, SendResult) and len(batch.msg_id.split(",")) == 3
    queues = {r.queue for r in ordered}
    assert [q.queue_id for q in queues] == [1]  # one key, the selector's queue
    offsets = [r.queue_offset for r in ordered]
    assert offsets == sorted(offsets) and len(set(offsets)) == 4
    with blocking.LitePullConsumer("GID_blk_direct", server.namesrv) as consumer:
        (queue,) = queues
        got = [m for batch_ in consumer.read(queue, offsets[0], offsets[-1] + 1) for m in batch_]
    assert [m.body for m in got] == [b"o0", b"o1", b"o2", b"o3"]


def test_a_failed_blocking_send_is_retried_through_the_loop_with_the_same_id() -> None:
    with (
        scripted_in_thread([Code.SERVICE_NOT_AVAILABLE]) as (namesrv, broker),
        blocking.Producer("PID_blk_retry", namesrv) as producer,
    ):
        first = producer.send(Message("Scripted", b"x"))  # no route yet: through the loop, refused once
        assert first.status is SendStatus.SEND_OK and len(broker.sends) == 2
        broker.script = [DROP]  # the next send's attempt on the calling thread finds its socket closed
        second = producer.send(Message("Scripted", b"y"))
        assert second.status is SendStatus.SEND_OK and len(broker.sends) == 4
        assert broker.sends[2].ext_fields["i"] == broker.sends[3].ext_fields["i"]  # the same message
        broker.script = [Code.SERVICE_NOT_AVAILABLE]  # a refusal RocketMQ retries
        assert producer.send(Message("Scripted", b"z")).status is SendStatus.SEND_OK
        assert len(broker.sends) == 6
        broker.script = [Code.MESSAGE_ILLEGAL]  # one it does not
        with pytest.raises(BrokerError) as refused:
            producer.send(Message("Scripted", b"w"))
        assert refused.value.code == Code.MESSAGE_ILLEGAL and len(broker.sends) == 7


@pytest.mark.parametrize("busy_poll_us", [0, 50_000])
def test_an_unanswered_blocking_send_times_out_and_the_next_one_is_answered(
    monkeypatch: pytest.MonkeyPatch, busy_poll_us: int
) -> None:
    reads = record_direct_reads(monkeypatch)
    with (
        scripted_in_thread([]) as (namesrv, broker),
        blocking.Producer(
            "PID_blk_silent", namesrv, send_timeout=2.0, busy_poll_us=busy_poll_us, busy_poll_adaptive=False
        ) as producer,
    ):
        producer.send(Message("Scripted", b"route"))
        broker.script = [SILENT]
        asked = time.monotonic()
        with pytest.raises(RemotingTimeoutError):
            producer.send(Message("Scripted", b"unanswered"))  # its whole send_timeout on this thread
        unanswered = [read for read in reads if read.started >= asked]
        result = producer.send(Message("Scripted", b"next"))
        assert result.status is SendStatus.SEND_OK
        assert [r.body for r in broker.sends] == [b"route", b"unanswered", b"next"]
    # With a fixed window, the calling thread polled the socket (reads without a timeout) until the window
    # ended, then slept in recv until the send timed out, as without one.
    polls = [read for read in unanswered if read.timeout == 0.0]
    (blocking_read,) = [read for read in unanswered if read.timeout != 0.0]
    assert blocking_read.timeout is not None and blocking_read.timeout > 0
    if busy_poll_us:
        assert polls and max(read.started for read in polls) < blocking_read.started
        assert blocking_read.started >= asked + busy_poll_us / 1e6, "slept before the window ended"
    else:
        assert polls == []


def test_a_blocking_batch_of_more_parts_than_one_sendmsg_takes_is_sent_whole_on_the_calling_thread(
    server: StandaloneServer,
) -> None:
    with blocking.AdminClient(server.namesrv) as admin:
        admin.create_topic("BlkWide", 1)
    bodies = [b"w%d" % i for i in range(600)]  # 3 parts each: over the 512 one sendmsg is given
    with blocking.Producer("PID_blk_wide", server.namesrv) as producer:
        producer.send(Message("BlkWide", b"route"))
        # With the loop stalled, a failed direct attempt could not fall back to it: the batch must
        # go whole over the calling thread's socket.
        stalled, release = threading.Event(), threading.Event()
        producer._loop.call_soon_threadsafe(lambda: (stalled.set(), release.wait(60)))
        assert stalled.wait(30)
        try:
            result = in_thread(lambda: producer.send_batch([Message("BlkWide", body) for body in bodies]))
        finally:
            release.set()
        assert isinstance(result, SendResult)
        (queue,) = producer.aio._publish["BlkWide"].queues
    with blocking.LitePullConsumer("GID_blk_wide", server.namesrv) as consumer:
        end = result.queue_offset + len(bodies)
        got = [m.body for batch in consumer.read(queue, result.queue_offset, end) for m in batch]
    assert got == bodies


def test_threads_sharing_a_blocking_producer_each_get_their_own_results(server: StandaloneServer) -> None:
    with blocking.AdminClient(server.namesrv) as admin:
        admin.create_topic("BlkShared", 4)
    results: list[SendResult] = []
    errors: list[BaseException] = []

    def sender(name: str) -> None:
        try:
            for i in range(50):
                result = producer.send(Message("BlkShared", f"{name}-{i}".encode()))
                results.append(result)
        except BaseException as exc:
            errors.append(exc)

    with blocking.Producer("PID_blk_shared", server.namesrv) as producer:
        producer.send(Message("BlkShared", b"route"))
        threads = [threading.Thread(target=sender, args=(f"t{n}",)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert not errors
    assert len(results) == 300
    assert len({r.msg_id for r in results}) == 300
    assert len({(r.queue, r.queue_offset) for r in results}) == 300  # each stored once, at its own offset


def test_a_garbage_collected_blocking_producer_closes_its_sockets(server: StandaloneServer) -> None:
    with blocking.AdminClient(server.namesrv) as admin:
        admin.create_topic("BlkGcProducer", 1)
    gc.collect()
    sockets_before = open_sockets()
    producer = blocking.Producer("PID_blk_gc", server.namesrv)
    producer.start()
    for i in range(3):
        producer.send(Message("BlkGcProducer", b"m%d" % i))  # the last ones on the calling thread
    assert len(open_sockets() - sockets_before) >= 3  # name server, the loop's broker one, the direct one
    del producer
    gc.collect()
    wait_until_blocking(
        lambda: open_sockets() <= sockets_before, message="the collected producer's sockets closing"
    )
    assert blocking.loop_thread() is None


def test_a_blocking_read_s_polling_ends_when_another_task_takes_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The calling thread polls its socket as the event loop does: after a yield that let another task
    run, an adaptive window stops polling there (the caller sleeps in recv) and shrinks."""
    yields: list[int] = []
    switches = iter(range(1_000_000))  # every look finds one more involuntary context switch
    patch_in_this_thread(monkeypatch, "preemptions", lambda: next(switches))
    patch_in_this_thread(monkeypatch, "yield_cpu", lambda: yields.append(1) or True)
    window = PollWindow(100_000, adaptive=True, clock=time.monotonic_ns)  # 100 ms
    window.window_ns = window.limit_ns  # as traffic would have opened it
    quiet, other = socket.socketpair()
    with quiet, other:
        assert _poll_into(quiet, memoryview(bytearray(64)), window.wrote(), window) is None
    assert len(yields) == 1, "the first preempted yield ended the poll"
    assert window.window_ns == 50_000_000, "shrunk as after a wasted poll"
