#!/usr/bin/env python3
"""Drive the official RocketMQ C++ client (PyPI ``rocketmq==0.4.4``) in a throwaway process.

Run as a subprocess by the interop tests, so that a crash or hang of ``librocketmq.so`` never
takes pytest down::

    python tests/interop/_cpp_scenarios.py <scenario> --namesrv 127.0.0.1:9876 --topic T [options]

Scenarios: ``produce``, ``push-consume``, ``pull-consume``, ``bench-produce``, ``bench-consume``
(``--help`` on each for its options).

Contract:

* the result is a JSON object on one line of stdout (the process's C-level stdout is redirected to
  stderr while the C++ library runs, so its chatter cannot corrupt it); the last line is the result.
  A line with ``"shutdown": "pending"`` comes first, right before the client's ``shutdown()``, and the
  final one after it: librocketmq has been seen to abort inside ``shutdown()``, and the run then still
  says what it sent or received (``read_cpp_result`` in tests/processes.py reads such a run);
* every result has ``"scenario"``, ``"ok"`` (no errors) and ``"errors"`` (list of strings),
  ``"elapsed"`` (seconds) and ``"shutdown"`` (``"ok"`` / ``"hung"`` / ``"error: ..."``);
* the process ends with ``os._exit`` right after printing (the C++ destructors may hang):
  exit code 0 normally, 1 if setup failed (exception before/at start), 2 if the hard-timeout
  watchdog fired (the JSON then carries whatever was collected and ``"watchdog": true``);
* the C++ client logs into ``~/logs/rocketmq-cpp``.

Limitations of the C API: message bodies are set and read as NUL-terminated C strings (a body
containing ``\\x00`` is truncated when read back); the batch ``SendResult.msg_id`` is ``""``; a
consumer cannot choose consumeFromWhere (CONSUME_FROM_LAST_OFFSET; a broker answers 0 for young
queues, so a new group starts at 0).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import sys
import threading
import time
import zlib
from typing import Any

# ---------------------------------------------------------------------------------------------
# output plumbing: keep a private handle on the real stdout, send fd 1 to stderr

_OUT_FD = 1  # replaced by redirect_stdout() when run as a script


def redirect_stdout() -> None:
    global _OUT_FD
    _OUT_FD = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable(file=sys.stderr)


_emit_lock = threading.Lock()
_T0 = time.monotonic()


def _write_result(result: dict[str, Any], code: int) -> None:
    result.setdefault("errors", [])
    result["ok"] = not result["errors"] and code == 0
    result["elapsed"] = round(time.monotonic() - _T0, 3)
    data = (json.dumps(result, default=str, separators=(",", ":")) + "\n").encode()
    while data:
        n = os.write(_OUT_FD, data)
        data = data[n:]
    with contextlib.suppress(OSError):
        os.fsync(_OUT_FD)


def emit(result: dict[str, Any], code: int = 0) -> None:
    """Print the final JSON line and leave immediately (never returns)."""
    with _emit_lock:
        _write_result(result, code)
        os._exit(code)


def shut_down(
    result: dict[str, Any], shutdown: Any, seconds: float, guard: threading.Lock | None = None
) -> None:
    """Report the result so far, then call the client's ``shutdown`` (see the module's contract);
    its outcome goes into ``result["shutdown"]``. *guard* is the lock of callbacks that still add to
    the result."""
    with _emit_lock, guard or contextlib.nullcontext():
        _write_result({**result, "shutdown": "pending"}, 0)
    result["shutdown"] = call_with_timeout(shutdown, seconds)


def start_watchdog(result: dict[str, Any], seconds: float) -> None:
    def fire() -> None:
        result.setdefault("errors", []).append(f"watchdog: hard timeout after {seconds:.0f}s")
        result["watchdog"] = True
        emit(result, 2)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()


def call_with_timeout(fn: Any, seconds: float) -> str:
    """Run fn() in a daemon thread (shutdown may hang inside the C++ lib)."""
    box: list[str] = []

    def run() -> None:
        try:
            fn()
            box.append("ok")
        except Exception as e:
            box.append(f"error: {e}")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return box[0] if box else "hung"


def _s(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


# ---------------------------------------------------------------------------------------------
# helpers shared by the scenarios

FILLER = "abcdefghijklmnopqrstuvwxyz0123456789"


def make_body(prefix: str, i: int, size: int | None) -> bytes:
    """Deterministic body: ``<prefix><i>`` or, with a size, ``<prefix><i>|`` + filler, exactly size bytes."""
    head = f"{prefix}{i}"
    if size is None:
        return head.encode()
    head += "|"
    reps = size // len(FILLER) + 1
    return (head + FILLER * reps)[:size].encode()


def parse_props(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for it in items or []:
        k, sep, v = it.partition("=")
        if not sep:
            raise SystemExit(f"--prop wants k=v, got {it!r}")
        out.append((k, v))
    return out


def sharding_arg(key: str) -> int:
    return int(key) if key.lstrip("-").isdigit() else zlib.crc32(key.encode()) & 0x7FFFFFFF


def apply_credentials(obj: Any, a: argparse.Namespace) -> None:
    if a.access_key is not None:
        obj.set_session_credentials(a.access_key, a.secret_key or "", a.channel)


def recv_to_dict(rmq: Any, handle: Any, prop_names: list[str], with_body: bool = True) -> dict[str, Any]:
    m = rmq.RecvMessage(handle)
    d: dict[str, Any] = {
        "id": _s(m.id),
        "topic": _s(m.topic),
        "tags": _s(m.tags),
        "keys": _s(m.keys),
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "reconsume_times": m.reconsume_times,
        "commit_log_offset": m.commit_log_offset,
        "store_size": m.store_size,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "delay_time_level": m.delay_time_level,
        "properties": {n: _s(m.get_property(n)) for n in prop_names},
    }
    if with_body:
        body = m.body or b""
        d["body_hex"] = body.hex()
        d["body_len"] = len(body)
    return d


def load_rmq() -> Any:
    import rocketmq.client as rmq  # import only in the subprocess

    return rmq


# ---------------------------------------------------------------------------------------------
# produce


def produce(a: argparse.Namespace) -> None:
    result: dict[str, Any] = {"scenario": "produce", "mode": a.mode, "sent": [], "errors": []}
    callbacks = threading.Lock()  # async sends' callbacks add to the result from the client's threads
    start_watchdog(result, a.timeout + 15)
    rmq = load_rmq()
    import ctypes

    from rocketmq.ffi import QUEUE_SELECTOR_CALLBACK, dll

    try:
        p = rmq.Producer(a.group, timeout=a.send_timeout_ms)
        p.set_namesrv_addr(a.namesrv)
        apply_credentials(p, a)
        p.start()
    except Exception as e:
        result["errors"].append(f"start: {e}")
        emit(result, 1)
    props = parse_props(a.prop)
    tags = a.tags.split(",") if a.tags else []
    deadline = time.monotonic() + a.timeout

    def build(i: int) -> Any:
        m = rmq.Message(a.topic)
        if tags:
            m.set_tags(tags[i % len(tags)].replace("{i}", str(i)))
        if a.keys_prefix is not None:
            m.set_keys(f"{a.keys_prefix}{i}")
        for k, v in props:
            m.set_property(k, v.replace("{i}", str(i)))
        if a.delay_level:
            m.set_delay_time_level(a.delay_level)
        m.set_body(make_body(a.body_prefix, i, a.body_size))
        return m

    def rec(r: Any, **extra: Any) -> dict[str, Any]:
        return {"msg_id": r.msg_id, "status": r.status.name, "offset": r.offset, **extra}

    if a.mode == "batch":
        size = a.batch_size or a.count
        for start in range(0, a.count, size):
            if time.monotonic() > deadline:
                result["errors"].append("timeout")
                break
            idx = list(range(start, min(start + size, a.count)))
            try:
                msgs = [build(i) for i in idx]
                r = p.send_batch(msgs)
                result["sent"].append(rec(r, index=idx[0], batch_size=len(idx)))
            except Exception as e:
                result["errors"].append(f"batch@{idx[0]}: {e}")
    elif a.mode == "async":
        done = threading.Semaphore(0)
        pending: list[Any] = []
        for i in range(a.count):

            def ok(r: Any, i: int = i) -> None:
                with callbacks:
                    result["sent"].append(rec(r, index=i))
                done.release()

            def fail(e: Any, i: int = i) -> None:
                with callbacks:
                    result["errors"].append(f"async#{i}: {e}")
                done.release()

            try:
                m = build(i)
                pending.append(m)  # keep the message alive until the callback ran
                p.send_async(m, ok, fail)
            except Exception as e:
                result["errors"].append(f"async#{i}: {e}")
                done.release()
        for _ in range(a.count):
            if not done.acquire(timeout=max(0.0, deadline - time.monotonic())):
                result["errors"].append("timeout waiting for async callbacks")
                break
        with callbacks:
            result["sent"].sort(key=lambda d: d["index"])
    else:
        arg = sharding_arg(a.sharding_key)
        chosen: list[int] = []

        def selector(mq_size: int, _msg: Any, user_arg: Any) -> int:
            q = ctypes.cast(user_arg, ctypes.POINTER(ctypes.c_int))[0] % mq_size
            chosen.append(q)
            return q

        sel = QUEUE_SELECTOR_CALLBACK(selector)
        for i in range(a.count):
            if i and a.pace_ms:
                time.sleep(a.pace_ms / 1000)
            if time.monotonic() > deadline:
                result["errors"].append("timeout")
                break
            if a.stop_file and os.path.exists(a.stop_file):
                break
            try:
                m = build(i)
                if a.mode == "sync":
                    result["sent"].append(rec(p.send_sync(m), index=i))
                elif a.mode == "oneway":
                    p.send_oneway(m)
                    result["sent"].append({"msg_id": None, "status": "ONEWAY", "offset": None, "index": i})
                elif a.mode == "orderly":
                    cres = rmq._CSendResult()
                    st = dll.SendMessageOrderly(
                        p._handle,
                        m,
                        sel,
                        ctypes.cast(ctypes.pointer(ctypes.c_int(arg)), ctypes.c_void_p),
                        a.retry_times,
                        ctypes.pointer(cres),
                    )
                    from rocketmq.exceptions import ffi_check

                    ffi_check(st)
                    r = rmq.SendResult(rmq.SendStatus(cres.sendStatus), cres.msgId.decode(), cres.offset)
                    result["sent"].append(rec(r, index=i, queue_id=chosen[-1] if chosen else None))
            except Exception as e:
                result["errors"].append(f"{a.mode}#{i}: {e}")
    if a.linger:
        time.sleep(a.linger)
    shut_down(result, p.shutdown, a.shutdown_timeout, guard=callbacks)
    emit(result)


# ---------------------------------------------------------------------------------------------
# push-consume / bench-consume


def hold_at_gate(gate: str) -> None:
    """Tell that consuming is held (``<gate>/paused``); hold until the test opens ``<gate>/resume``."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(os.path.join(gate, "paused"), os.O_CREAT | os.O_EXCL))
    while not os.path.exists(os.path.join(gate, "resume")):
        time.sleep(0.01)


def push_consume(a: argparse.Namespace, bench: bool = False) -> None:
    result: dict[str, Any] = {"scenario": "bench-consume" if bench else "push-consume", "errors": []}
    messages: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    if not bench:
        result["messages"] = messages
        result["failed_deliveries"] = failed
        result["count"] = 0
    start_watchdog(result, a.timeout + a.linger + a.shutdown_timeout + 10)
    rmq = load_rmq()
    from rocketmq.ffi import MSG_CALLBACK_FUNC, MessageModel, dll

    prop_names = [n for n in (a.prop_names or "").split(",") if n]
    fail_counts: dict[str, int] = {}
    reached = threading.Event()
    lock = threading.Lock()
    stamps: dict[str, float] = {}
    count = [0]

    def on_message(_consumer: Any, handle: Any) -> int:
        try:
            if bench:
                with lock:
                    count[0] += 1
                    now = time.monotonic()
                    stamps.setdefault("first", now)
                    stamps["last"] = now
                    if a.expect and count[0] >= a.expect:
                        reached.set()
                return 0
            d = recv_to_dict(rmq, handle, prop_names, with_body=not a.no_body)
            d["received_at"] = round(time.monotonic() - _T0, 3)
            with lock:
                n = fail_counts.get(d["id"], 0)
                if n < a.fail_times:
                    fail_counts[d["id"]] = n + 1
                    failed.append(d)
                    return 1  # RECONSUME_LATER (orderly: SUSPEND_CURRENT_QUEUE_A_MOMENT)
                messages.append(d)
                result["count"] = len(messages)
                if a.expect and len(messages) >= a.expect:
                    reached.set()
                pause = a.pause_after and len(messages) >= a.pause_after
            if pause:
                hold_at_gate(a.gate)
            return 0
        except Exception as e:
            result["errors"].append(f"callback: {e!r}")
            return 0

    func = MSG_CALLBACK_FUNC(on_message)
    try:
        c = rmq.PushConsumer(
            a.group,
            orderly=a.orderly,
            message_model=MessageModel.BROADCASTING if a.broadcast else MessageModel.CLUSTERING,
        )
        c.set_namesrv_addr(a.namesrv)
        apply_credentials(c, a)
        if a.instance_name:
            c.set_instance_name(a.instance_name)
        if a.threads:
            c.set_thread_count(a.threads)
        if a.batch_max_size:
            c.set_message_batch_max_size(a.batch_max_size)
        from rocketmq.exceptions import ffi_check

        ffi_check(dll.Subscribe(c._handle, a.topic.encode(), a.expression.encode()))
        reg = dll.RegisterMessageCallbackOrderly if a.orderly else dll.RegisterMessageCallback
        ffi_check(reg(c._handle, func))
        t_start = time.monotonic()
        c.start()
    except Exception as e:
        result["errors"].append(f"start: {e}")
        emit(result, 1)
    if a.gate:
        stop = os.path.join(a.gate, "stop")
        deadline = time.monotonic() + a.timeout
        while not (reached.wait(0.05) or os.path.exists(stop) or time.monotonic() > deadline):
            pass
    else:
        reached.wait(a.timeout)
    if a.expect and not reached.is_set():
        got = count[0] if bench else len(messages)
        result["timed_out"] = True
        if not a.allow_fewer:
            result["errors"].append(f"timeout: got {got} of {a.expect} messages")
    else:
        result["timed_out"] = not reached.is_set() and a.expect > 0
    if a.linger:
        time.sleep(a.linger)
    if bench:
        with lock:
            n = count[0]
            first, last = stamps.get("first"), stamps.get("last")
        result["count"] = n
        result["seconds_from_start"] = round((last - t_start), 3) if last else None
        result["seconds_from_first"] = round((last - first), 3) if last and first else None
        span = (last - first) if last and first and last > first else None
        result["msgs_per_sec"] = round((n - 1) / span, 1) if span else None
        result["msgs_per_sec_incl_startup"] = round(n / (last - t_start), 1) if last else None
    shut_down(result, c.shutdown, a.shutdown_timeout, guard=lock)
    with lock:
        emit(result)


# ---------------------------------------------------------------------------------------------
# pull-consume


def pull_consume(a: argparse.Namespace) -> None:
    import ctypes

    result: dict[str, Any] = {
        "scenario": "pull-consume",
        "messages": [],
        "queues": [],
        "queue_ids": [],
        "errors": [],
    }
    start_watchdog(result, a.timeout + a.shutdown_timeout + 10)
    rmq = load_rmq()
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import _CMessageQueue, _CPullStatus, dll

    prop_names = [n for n in (a.prop_names or "").split(",") if n]
    try:
        c = rmq.PullConsumer(a.group)
        c.set_namesrv_addr(a.namesrv)
        apply_credentials(c, a)
        c.start()
        mqs = ctypes.POINTER(_CMessageQueue)()
        n = ctypes.c_int()
        ffi_check(
            dll.FetchSubscriptionMessageQueues(
                c._handle, a.topic.encode(), ctypes.pointer(mqs), ctypes.pointer(n)
            )
        )
    except Exception as e:
        result["errors"].append(f"start: {e}")
        emit(result, 1)
    deadline = time.monotonic() + a.timeout
    queues = sorted((mqs[i] for i in range(n.value)), key=lambda q: q.queueId)
    result["queue_ids"] = [q.queueId for q in queues]
    if not queues:
        result["errors"].append(f"no message queues for topic {a.topic} (no route?)")
    for mq in queues:
        info: dict[str, Any] = {
            "queue_id": mq.queueId,
            "broker_name": _s(mq.brokerName),
            "start_offset": a.from_offset,
            "found": 0,
            "statuses": [],
        }
        result["queues"].append(info)
        offset, retries = a.from_offset, 0
        while time.monotonic() < deadline:
            res = dll.Pull(c._handle, ctypes.pointer(mq), a.expression.encode(), offset, a.max_num)
            st = res.pullStatus
            name = _CPullStatus(st).name if st in iter(_CPullStatus) else str(st)
            info["statuses"].append(name)
            info.update(next_offset=res.nextBeginOffset, min_offset=res.minOffset, max_offset=res.maxOffset)
            if st == _CPullStatus.FOUND:
                for i in range(int(res.size)):
                    result["messages"].append(
                        recv_to_dict(rmq, res.msgFoundList[i], prop_names, with_body=not a.no_body)
                    )
                info["found"] += int(res.size)
            dll.ReleasePullResult(res)
            if st == _CPullStatus.BROKER_TIMEOUT:
                retries += 1
                if retries > 3:
                    result["errors"].append(f"queue {mq.queueId}: broker timeout")
                    break
                continue
            if st == _CPullStatus.NO_NEW_MSG:
                break
            if res.nextBeginOffset == offset and st != _CPullStatus.FOUND:
                break  # OFFSET_ILLEGAL / NO_MATCHED_MSG without progress
            offset = res.nextBeginOffset
        else:
            result["errors"].append(f"timeout while pulling queue {mq.queueId}")
        if len(info["statuses"]) > 20:
            info["statuses"] = [*info["statuses"][:10], "...", *info["statuses"][-5:]]
    with contextlib.suppress(Exception):
        dll.ReleaseSubscriptionMessageQueue(mqs)
    result["count"] = len(result["messages"])
    shut_down(result, c.shutdown, a.shutdown_timeout)
    emit(result)


# ---------------------------------------------------------------------------------------------
# bench-produce


def bench_produce(a: argparse.Namespace) -> None:
    result: dict[str, Any] = {
        "scenario": "bench-produce",
        "errors": [],
        "count": a.count,
        "body_size": a.body_size,
        "threads": a.threads,
    }
    start_watchdog(result, a.timeout + a.shutdown_timeout + 10)
    rmq = load_rmq()
    # One producer per thread, each with its own instance name (= own client factory and TCP
    # connection): threads sharing one C++ producer fail with "GetTransport ... get timed_mutex
    # timeout" / "No route info of this topic" under contention.
    from rocketmq.ffi import dll

    producers = []
    try:
        for k in range(a.threads):
            p = rmq.Producer(a.group, timeout=a.send_timeout_ms)
            p.set_namesrv_addr(a.namesrv)
            if a.threads > 1:
                dll.SetProducerInstanceName(p._handle, f"bench{k}".encode())
            apply_credentials(p, a)
            p.start()
            # warm-up: route lookup + connection, not timed
            w = rmq.Message(a.topic)
            w.set_tags("warmup")
            w.set_body(b"warmup")
            p.send_sync(w)
            producers.append(p)
    except Exception as e:
        result["errors"].append(f"start: {e}")
        emit(result, 1)
    result["warmup_messages"] = len(producers)
    body = make_body("bench-", 0, a.body_size)
    ok = [0]
    errs: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + a.timeout
    next_i = [0]

    def worker(p: Any) -> None:
        while time.monotonic() < deadline:
            with lock:
                i = next_i[0]
                if i >= a.count:
                    return
                next_i[0] += 1
            try:
                m = rmq.Message(a.topic)
                m.set_tags("bench")
                m.set_body(body)
                if a.oneway:
                    p.send_oneway(m)
                else:
                    p.send_sync(m)
                with lock:
                    ok[0] += 1
            except Exception as e:
                with lock:
                    errs.append(str(e)[:300])

    t0 = time.monotonic()
    ths = [threading.Thread(target=worker, args=(p,), daemon=True) for p in producers]
    for t in ths:
        t.start()
    for t in ths:
        t.join(max(0.0, deadline - time.monotonic()) + 1)
    secs = time.monotonic() - t0
    result.update(
        sent_ok=ok[0],
        seconds=round(secs, 3),
        msgs_per_sec=round(ok[0] / secs, 1) if secs else None,
        mode="oneway" if a.oneway else "sync",
        error_count=len(errs),
    )
    result["errors"] = errs[:20]
    if ok[0] < a.count and not errs:
        result["errors"].append(f"timeout: sent {ok[0]} of {a.count}")
    shut_down(result, lambda: [p.shutdown() for p in producers], a.shutdown_timeout)
    emit(result)


# ---------------------------------------------------------------------------------------------
# CLI


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="scenario", required=True)

    def common(sp: argparse.ArgumentParser, group: str) -> None:
        sp.add_argument("--namesrv", required=True, help="name server address ip:port")
        sp.add_argument("--topic", required=True)
        sp.add_argument("--group", default=group, help=f"producer/consumer group (default {group})")
        sp.add_argument("--access-key", help="ACL access key (signs with set_session_credentials)")
        sp.add_argument("--secret-key", help="ACL secret key")
        sp.add_argument("--channel", default="ALIYUN", help="OnsChannel for credentials (default ALIYUN)")
        sp.add_argument(
            "--shutdown-timeout",
            type=float,
            default=8.0,
            help="seconds to wait for shutdown() before giving up (default 8)",
        )

    p = sub.add_parser("produce", help="send N messages")
    common(p, "PID_cometmq_interop")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--mode", choices=["sync", "async", "oneway", "batch", "orderly"], default="sync")
    p.add_argument("--tags", help="tag; comma-separated list = cycle per message; '{i}' = index")
    p.add_argument("--keys-prefix", help="keys = <prefix><index>")
    p.add_argument(
        "--prop",
        action="append",
        default=[],
        metavar="K=V",
        help="user property on every message (repeatable; '{i}' in V = index)",
    )
    p.add_argument("--body-prefix", default="msg-", help="body = <prefix><index> (default msg-)")
    p.add_argument("--body-size", type=int, help="exact body size: <prefix><index>| + [a-z0-9]* filler")
    p.add_argument(
        "--sharding-key", default="0", help="orderly: selector arg (int, or string hashed by crc32)"
    )
    p.add_argument("--retry-times", type=int, default=3, help="orderly: retries")
    p.add_argument("--batch-size", type=int, default=0, help="batch: messages per batch (default: all)")
    p.add_argument("--delay-level", type=int, default=0, help="delay time level 1..18")
    p.add_argument("--send-timeout-ms", type=int, default=3000)
    p.add_argument("--timeout", type=float, default=60.0, help="overall seconds for sending")
    p.add_argument("--linger", type=float, default=0.0, help="seconds to stay up after sending")
    p.add_argument(
        "--pace-ms", type=int, default=0, help="sync, oneway, orderly: milliseconds to sleep between sends"
    )
    p.add_argument("--stop-file", help="sync, oneway, orderly: send no more once this file exists")

    def consumer_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--expression", default="*", help="subscription expression (default *)")
        sp.add_argument("--expect", type=int, default=0, help="stop after N messages (0: run until timeout)")
        sp.add_argument("--timeout", type=float, default=30.0)
        sp.add_argument("--orderly", action="store_true", help="orderly listener (locks queues)")
        sp.add_argument("--broadcast", action="store_true", help="BROADCASTING message model")
        sp.add_argument("--instance-name")
        sp.add_argument("--threads", type=int, default=0, help="consume thread count")
        sp.add_argument("--batch-max-size", type=int, default=0, help="consumeMessageBatchMaxSize")
        sp.add_argument("--linger", type=float, default=0.0, help="keep consuming this long after --expect")
        sp.add_argument("--allow-fewer", action="store_true", help="timeout before --expect is not an error")

    c = sub.add_parser("push-consume", help="push consumer until N messages or timeout")
    common(c, "GID_cometmq_interop")
    consumer_opts(c)
    c.add_argument("--prop-names", help="comma-separated property names to report per message")
    c.add_argument(
        "--fail-times",
        type=int,
        default=0,
        help="answer RECONSUME_LATER to the first K deliveries of each message id",
    )
    c.add_argument("--no-body", action="store_true", help="omit body_hex")
    c.add_argument(
        "--pause-after",
        type=int,
        default=0,
        help="once N messages are consumed, create <gate>/paused and hold every callback until <gate>/resume",
    )
    c.add_argument(
        "--gate", help="directory of --pause-after's files; <gate>/stop ends the run like --expect"
    )

    q = sub.add_parser("pull-consume", help="pull every queue from an offset until NO_NEW_MSG")
    common(q, "GID_cometmq_interop_pull")
    q.add_argument("--expression", default="*")
    q.add_argument("--from-offset", type=int, default=0)
    q.add_argument("--max-num", type=int, default=32)
    q.add_argument("--timeout", type=float, default=30.0)
    q.add_argument("--prop-names")
    q.add_argument("--no-body", action="store_true")

    b = sub.add_parser("bench-produce", help="throughput of sync (or oneway) sends")
    common(b, "PID_cometmq_bench")
    b.add_argument("--count", type=int, default=10000)
    b.add_argument("--body-size", type=int, default=1024)
    b.add_argument(
        "--threads", type=int, default=1, help="sender threads, one producer (own instance name) each"
    )
    b.add_argument("--oneway", action="store_true")
    b.add_argument("--send-timeout-ms", type=int, default=3000)
    b.add_argument("--timeout", type=float, default=120.0)

    bc = sub.add_parser("bench-consume", help="push-consume throughput")
    common(bc, "GID_cometmq_bench")
    consumer_opts(bc)
    bc.set_defaults(timeout=120.0)
    return ap


def main() -> None:
    a = build_parser().parse_args()
    redirect_stdout()
    try:
        if a.scenario == "produce":
            produce(a)
        elif a.scenario == "push-consume":
            push_consume(a)
        elif a.scenario == "bench-consume":
            a.expect = a.expect or 10000
            a.fail_times, a.no_body, a.prop_names = 0, True, ""
            a.pause_after, a.gate = 0, None
            push_consume(a, bench=True)
        elif a.scenario == "pull-consume":
            pull_consume(a)
        elif a.scenario == "bench-produce":
            bench_produce(a)
    except SystemExit as e:
        emit({"scenario": a.scenario, "errors": [f"exit: {e}"]}, 1)
    except BaseException as e:
        emit({"scenario": a.scenario, "errors": [f"unexpected: {e!r}"]}, 1)


if __name__ == "__main__":
    main()
