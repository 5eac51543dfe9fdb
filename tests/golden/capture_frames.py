#!/usr/bin/env python3
"""Capture golden RocketMQ remoting frames from the official C++ client.

Standalone (stdlib only; the child processes additionally need PyPI ``rocketmq==0.4.4``).

What it does (default mode):

* listens on 127.0.0.1:<free port> and plays both NameServer and broker ``broker-a`` at that
  address (route: broker-a at our own address, perm 6, 4 read/write queues for every topic);
* answers every request concurrently (a held pull never delays other replies) with JSON headers
  (type 0), flag 1, the request's opaque and string-only extFields;
* records every received frame byte-for-byte (4-byte length prefix included);
* drives the C++ client in child processes (this same file with ``--child ...``), one after the
  other, each killed with SIGKILL by PID if it overstays its timeout:
  producer (sync / batch / compressed / oneway sends), push consumer ("TagA || TagB", ~8 s),
  orderly push consumer (~5 s), pull consumer, and a "retry" pair (one message to TopicServed --
  the only topic whose messages the listener stores and serves -- consumed with RECONSUME_LATER,
  which makes the client send CONSUMER_SEND_MSG_BACK), and a BROADCASTING push consumer (~2 s);
* writes selected frames to ``tests/golden/frames/<name>.bin`` plus ``frames/index.json``
  (decoded header, body length and a short description per file).

Other modes:

* ``--serve --port P --duration S``: no children, no files; keeps a tiny in-memory message store
  (sends are stored, pulls return FOUND with hand-encoded records, offsets are remembered) so
  ``tests/interop/_cpp_scenarios.py`` can be tried end-to-end without a real broker.
* ``--child producer|push|orderly|pull --namesrv ADDR``: internal, runs one C++ client.

Usage:  .venv/bin/python tests/golden/capture_frames.py [--out DIR] [--keep-all DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import struct
import sys
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "frames")

TOPIC = "TopicTest"
PRODUCER_GROUP = "PID_cpp_golden"
PUSH_GROUP = "GID_cpp_golden"
ORDERLY_GROUP = "GID_cpp_golden_orderly"
PULL_GROUP = "GID_cpp_golden_pull"
RETRY_GROUP = "GID_cpp_golden_retry"
BROADCAST_GROUP = "GID_cpp_golden_broadcast"
SERVED_TOPIC = "TopicServed"  # the only topic whose messages the capture listener stores and serves

SYNC_BODY = b"Hello CometMQ from C++"
ONEWAY_BODY = b"oneway-body"
COMPRESSED_BODY = b"x" * 5000

MAGIC_MESSAGE = -626843481  # 0xDAA320A7 as signed int32

# --------------------------------------------------------------------------------------------
# framing helpers


@dataclass
class Frame:
    seq: int
    t: float
    conn: int
    phase: str
    raw: bytes
    header: dict[str, Any]
    body: bytes

    @property
    def code(self) -> int:
        return int(self.header.get("code", -1))

    @property
    def ext(self) -> dict[str, Any]:
        return self.header.get("extFields") or {}


def encode_response(
    code: int, opaque: int, ext: dict[str, Any] | None = None, body: bytes = b"", remark: str = ""
) -> bytes:
    hdr: dict[str, Any] = {
        "code": code,
        "extFields": {k: str(v) for k, v in (ext or {}).items()},
        "flag": 1,
        "language": "JAVA",
        "opaque": opaque,
        "remark": remark,
        "serializeTypeCurrentRPC": "JSON",
        "version": 409,
    }
    h = json.dumps(hdr, separators=(",", ":")).encode()
    return struct.pack(">ii", 4 + len(h) + len(body), len(h)) + h + body


def parse_properties(s: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in s.split("\x02"):
        if "\x01" in pair:
            k, v = pair.split("\x01", 1)
            out[k] = v
    return out


def offset_msg_id(port: int, phys: int) -> str:
    return (socket.inet_aton("127.0.0.1") + struct.pack(">iq", port, phys)).hex().upper()


# --------------------------------------------------------------------------------------------
# the fake namesrv + broker


@dataclass
class StoredMsg:
    record: bytes
    tags: str


@dataclass
class FakeServer:
    serve: bool = False  # keep messages and serve them on pull (all topics)
    serve_topics: frozenset[str] = frozenset()  # ... or only these topics
    pull_hold: float = 1.0  # seconds to hold a suspendable pull before answering 19
    port: int = 0
    phase: str = "-"
    frames: list[Frame] = field(default_factory=list)
    consumers: dict[str, list[str]] = field(default_factory=dict)
    queues: dict[tuple[str, int], list[StoredMsg]] = field(default_factory=dict)
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    qoffset: dict[tuple[str, int], int] = field(default_factory=dict)
    phys: int = 0
    conn_seq: int = 0
    new_msg: asyncio.Event | None = None

    def serving(self, topic: str) -> bool:
        return self.serve or topic in self.serve_topics

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> asyncio.AbstractServer:
        self.new_msg = asyncio.Event()
        srv = await asyncio.start_server(self._on_conn, "127.0.0.1", port)
        self.port = srv.sockets[0].getsockname()[1]
        return srv

    async def _on_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.conn_seq += 1
        conn = self.conn_seq
        peer = writer.get_extra_info("peername")
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                prefix = await reader.readexactly(4)
                (length,) = struct.unpack(">i", prefix)
                rest = await reader.readexactly(length)
                (word,) = struct.unpack(">i", rest[:4])
                hlen = word & 0xFFFFFF
                try:
                    header = json.loads(rest[4 : 4 + hlen].decode("utf-8"))
                except ValueError:
                    header = {"_undecodable": rest[4 : 4 + hlen].hex(), "_word": word}
                body = rest[4 + hlen :]
                fr = Frame(len(self.frames), time.time(), conn, self.phase, prefix + rest, header, body)
                self.frames.append(fr)
                t = asyncio.create_task(self._handle(fr, writer, peer))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for t in tasks:
                t.cancel()
            writer.close()

    async def _handle(self, fr: Frame, writer: asyncio.StreamWriter, peer: Any) -> None:
        h = fr.header
        if h.get("flag", 0) & 1:  # a response to something we never send
            return
        opaque = int(h.get("opaque", 0))
        try:
            resp = await self._dispatch(fr, opaque, peer)
        except Exception as e:  # keep the listener alive whatever happens
            resp = encode_response(1, opaque, remark=f"capture listener error: {e!r}")
        if resp is not None and not writer.is_closing():
            writer.write(resp)

    async def _dispatch(self, fr: Frame, opaque: int, peer: Any) -> bytes | None:
        code, ext = fr.code, fr.ext
        if code == 105:  # GET_ROUTEINFO_BY_TOPIC
            route = {
                "brokerDatas": [
                    {"brokerAddrs": {"0": self.addr}, "brokerName": "broker-a", "cluster": "DefaultCluster"}
                ],
                "filterServerTable": {},
                "queueDatas": [
                    {
                        "brokerName": "broker-a",
                        "perm": 6,
                        "readQueueNums": 4,
                        "topicSysFlag": 0,
                        "writeQueueNums": 4,
                    }
                ],
            }
            return encode_response(0, opaque, body=json.dumps(route, separators=(",", ":")).encode())
        if code == 10 or code == 310 or code == 320:
            return self._send(fr, opaque, peer)
        if code == 34:  # HEART_BEAT
            try:
                hb = json.loads(fr.body.decode("utf-8"))
            except ValueError:
                hb = {}
            cid = hb.get("clientID", "")
            for cd in hb.get("consumerDataSet") or []:
                lst = self.consumers.setdefault(cd.get("groupName", ""), [])
                if cid not in lst:
                    lst.append(cid)
            return encode_response(0, opaque)
        if code == 35:  # UNREGISTER_CLIENT
            grp = str(ext.get("consumerGroup") or "")
            if grp in self.consumers and ext.get("clientID") in self.consumers[grp]:
                self.consumers[grp].remove(ext["clientID"])
            return encode_response(0, opaque)
        if code == 38:  # GET_CONSUMER_LIST_BY_GROUP
            ids = self.consumers.get(str(ext.get("consumerGroup")), [])
            if not ids:
                return encode_response(
                    1, opaque, remark=f"no consumer for this group, {ext.get('consumerGroup')}"
                )
            return encode_response(0, opaque, body=json.dumps({"consumerIdList": ids}).encode())
        if code == 14:  # QUERY_CONSUMER_OFFSET
            key = (str(ext.get("consumerGroup")), str(ext.get("topic")), int(ext.get("queueId", 0)))
            return encode_response(
                0, opaque, {"offset": self.offsets.get(key, 0) if self.serving(key[1]) else 0}
            )
        if code == 15:  # UPDATE_CONSUMER_OFFSET
            key = (str(ext.get("consumerGroup")), str(ext.get("topic")), int(ext.get("queueId", 0)))
            self.offsets[key] = int(ext.get("commitOffset", 0))
            return encode_response(0, opaque)
        if code == 11:
            return await self._pull(fr, opaque)
        if code in (30, 31):  # GET_MAX_OFFSET / GET_MIN_OFFSET
            topic = str(ext.get("topic"))
            q = self.queues.get((topic, int(ext.get("queueId", 0))), [])
            return encode_response(0, opaque, {"offset": len(q) if code == 30 and self.serving(topic) else 0})
        if code == 41:  # LOCK_BATCH_MQ: grant everything asked for
            try:
                req = json.loads(fr.body.decode("utf-8"))
            except ValueError:
                req = {}
            return encode_response(0, opaque, body=json.dumps({"lockOKMQSet": req.get("mqSet", [])}).encode())
        return encode_response(0, opaque)

    # ---- send ---------------------------------------------------------------------------
    def _send(self, fr: Frame, opaque: int, peer: Any) -> bytes:
        ext = fr.ext
        v2 = fr.code in (310, 320)
        topic = str(ext.get("b" if v2 else "topic"))
        qid = int(ext.get("e" if v2 else "queueId", 0))
        qid = qid if qid >= 0 else 0
        sysflag = int(ext.get("f" if v2 else "sysFlag", 0))
        flag = int(ext.get("h" if v2 else "flag", 0))
        born = int(ext.get("g" if v2 else "bornTimestamp", 0))
        props = str(ext.get("i" if v2 else "properties") or "")
        reconsume = int(ext.get("j" if v2 else "reconsumeTimes", 0) or 0)
        batch = str(ext.get("m" if v2 else "batch", "")).lower() in ("1", "true") or fr.code == 320
        entries: list[tuple[int, bytes, str]] = []
        if batch:
            b, pos = fr.body, 0
            while pos + 20 <= len(b):
                total, _magic, _crc, eflag, blen = struct.unpack_from(">iiiii", b, pos)
                ebody = b[pos + 20 : pos + 20 + blen]
                (plen,) = struct.unpack_from(">h", b, pos + 20 + blen)
                eprops = b[pos + 22 + blen : pos + 22 + blen + plen].decode("utf-8", "replace")
                if props:
                    eprops = eprops + ("" if eprops.endswith("\x02") or not eprops else "\x02") + props
                entries.append((eflag, ebody, eprops))
                pos += total
        else:
            entries.append((flag, fr.body, props))
        key = (topic, qid)
        first_q = self.qoffset.get(key, 0)
        ids = []
        born_host = socket.inet_aton(peer[0]) + struct.pack(">i", peer[1])
        store_host = socket.inet_aton("127.0.0.1") + struct.pack(">i", self.port)
        for eflag, ebody, eprops in entries:
            qoff = self.qoffset.get(key, 0)
            self.qoffset[key] = qoff + 1
            ids.append(offset_msg_id(self.port, self.phys))
            if self.serving(topic):
                tb, pb = topic.encode(), eprops.encode()
                total = 91 + len(ebody) + len(tb) + len(pb)
                rec = (
                    struct.pack(
                        ">iiiiiqqiq",
                        total,
                        MAGIC_MESSAGE,
                        zlib.crc32(ebody) & 0x7FFFFFFF,
                        qid,
                        eflag,
                        qoff,
                        self.phys,
                        sysflag & ~0x30,
                        born,
                    )
                    + born_host
                    + struct.pack(">q", int(time.time() * 1000))
                    + store_host
                    + struct.pack(">iqi", reconsume, 0, len(ebody))
                    + ebody
                    + struct.pack(">b", len(tb))
                    + tb
                    + struct.pack(">h", len(pb))
                    + pb
                )
                self.queues.setdefault(key, []).append(
                    StoredMsg(rec, parse_properties(eprops).get("TAGS", ""))
                )
                self.phys += total
            else:
                self.phys += 100
        if self.new_msg is not None:
            self.new_msg.set()
            self.new_msg = asyncio.Event()
        return encode_response(
            0,
            opaque,
            {
                "msgId": ",".join(ids),
                "queueId": qid,
                "queueOffset": first_q,
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )

    # ---- pull ---------------------------------------------------------------------------
    async def _pull(self, fr: Frame, opaque: int) -> bytes:
        ext = fr.ext
        topic = str(ext.get("topic"))
        qid = int(ext.get("queueId", 0))
        off = int(ext.get("queueOffset", 0))
        maxn = int(ext.get("maxMsgNums", 32))
        sysflag = int(ext.get("sysFlag", 0))
        group = str(ext.get("consumerGroup"))
        if sysflag & 1 and self.serving(topic):
            self.offsets[(group, topic, qid)] = int(ext.get("commitOffset", 0))
        sub = str(ext.get("subscription") or "*").strip()
        tagset = None if sub in ("", "*") else {t.strip() for t in sub.split("||")}
        deadline = time.monotonic() + (self.pull_hold if sysflag & 2 else 0)
        while True:
            q = self.queues.get((topic, qid), []) if self.serving(topic) else []
            if off < len(q):
                found, nxt = [], off
                while nxt < len(q) and len(found) < maxn:
                    if tagset is None or q[nxt].tags in tagset:
                        found.append(q[nxt].record)
                    nxt += 1
                hdr = {"suggestWhichBrokerId": 0, "nextBeginOffset": nxt, "minOffset": 0, "maxOffset": len(q)}
                if found:
                    return encode_response(0, opaque, hdr, b"".join(found), remark="FOUND")
                return encode_response(20, opaque, hdr, remark="NO_MATCHED_MESSAGE")
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.new_msg is None:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.new_msg.wait(), min(remaining, 0.2))
        q = self.queues.get((topic, qid), []) if self.serving(topic) else []
        return encode_response(
            19,
            opaque,
            {
                "suggestWhichBrokerId": 0,
                "nextBeginOffset": min(off, len(q)),
                "minOffset": 0,
                "maxOffset": len(q),
            },
            remark="OFFSET_FOUND_NULL" if off == len(q) else "OFFSET_OVERFLOW_BADLY",
        )


# --------------------------------------------------------------------------------------------
# children: one C++ client per process


def _child(role: str, namesrv: str, run_seconds: float) -> None:
    import rocketmq.client as rmq  # only the children need the C++ library
    from rocketmq.ffi import MSG_CALLBACK_FUNC, dll

    result: dict[str, Any] = {"role": role, "pid": os.getpid()}
    if role == "producer":
        p = rmq.Producer(PRODUCER_GROUP)
        p.set_namesrv_addr(namesrv)
        p.start()
        m = rmq.Message(TOPIC)
        m.set_tags("TagA")
        m.set_keys("key1")
        m.set_property("myprop", "v1")
        m.set_body(SYNC_BODY)
        r = p.send_sync(m)
        result["sync"] = [r.status.name, r.msg_id, r.offset]
        batch = []
        for i in (1, 2):
            bm = rmq.Message(TOPIC)
            bm.set_tags("TagB")
            bm.set_keys(f"bkey{i}")
            bm.set_body(f"batch-{i}".encode())
            batch.append(bm)
        r = p.send_batch(batch)
        result["batch"] = [r.status.name, r.msg_id, r.offset]
        cm = rmq.Message(TOPIC)
        cm.set_tags("TagA")
        cm.set_body(COMPRESSED_BODY)
        r = p.send_sync(cm)
        result["compressed"] = [r.status.name, r.msg_id, r.offset]
        om = rmq.Message(TOPIC)
        om.set_tags("TagA")
        om.set_body(ONEWAY_BODY)
        p.send_oneway(om)
        time.sleep(run_seconds)
        p.shutdown()
    elif role in ("push", "orderly", "broadcast"):
        group = {"push": PUSH_GROUP, "orderly": ORDERLY_GROUP, "broadcast": BROADCAST_GROUP}[role]
        model = rmq.MessageModel.BROADCASTING if role == "broadcast" else rmq.MessageModel.CLUSTERING
        c = rmq.PushConsumer(group, orderly=(role == "orderly"), message_model=model)
        c.set_namesrv_addr(namesrv)
        got: list[str] = []

        def cb(_consumer: Any, msg: Any) -> int:
            got.append(rmq.RecvMessage(msg).id)
            return 0

        func = MSG_CALLBACK_FUNC(cb)
        dll.Subscribe(c._handle, TOPIC.encode(), b"TagA || TagB" if role == "push" else b"*")
        (dll.RegisterMessageCallbackOrderly if role == "orderly" else dll.RegisterMessageCallback)(
            c._handle, func
        )
        c.start()
        time.sleep(run_seconds)
        c.shutdown()
        result["received"] = got
    elif role == "retry":
        p = rmq.Producer(PRODUCER_GROUP + "_retry")
        p.set_namesrv_addr(namesrv)
        p.start()
        m = rmq.Message(SERVED_TOPIC)
        m.set_tags("TagA")
        m.set_keys("retry-key")
        m.set_body(b"please-retry-me")
        r = p.send_sync(m)
        result["sent"] = [r.status.name, r.msg_id, r.offset]
        p.shutdown()
        c = rmq.PushConsumer(RETRY_GROUP)
        c.set_namesrv_addr(namesrv)
        deliveries: list[list[Any]] = []

        def cb_retry(_consumer: Any, msg: Any) -> int:
            rm = rmq.RecvMessage(msg)
            deliveries.append([rm.id, rm.reconsume_times])
            return 1  # RECONSUME_LATER -> CONSUMER_SEND_MSG_BACK

        func = MSG_CALLBACK_FUNC(cb_retry)
        dll.Subscribe(c._handle, SERVED_TOPIC.encode(), b"*")
        dll.RegisterMessageCallback(c._handle, func)
        c.start()
        time.sleep(run_seconds)
        c.shutdown()
        result["deliveries"] = deliveries
    elif role == "pull":
        import ctypes

        from rocketmq.ffi import _CMessageQueue

        c = rmq.PullConsumer(PULL_GROUP)
        c.set_namesrv_addr(namesrv)
        c.start()
        mqs = ctypes.POINTER(_CMessageQueue)()
        n = ctypes.c_int()
        dll.FetchSubscriptionMessageQueues(c._handle, TOPIC.encode(), ctypes.pointer(mqs), ctypes.pointer(n))
        statuses = []
        for i in range(n.value):
            res = dll.Pull(c._handle, ctypes.pointer(mqs[i]), b"*", 0, 32)
            statuses.append([mqs[i].queueId, res.pullStatus, res.nextBeginOffset])
            dll.ReleasePullResult(res)
        result["pulls"] = statuses
        time.sleep(run_seconds)
        c.shutdown()
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)


async def _run_child(
    srv: FakeServer, role: str, run_seconds: float, timeout: float, log: list[dict[str, Any]]
) -> None:
    srv.phase = role
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        role,
        "--namesrv",
        srv.addr,
        "--run-seconds",
        str(run_seconds),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    entry: dict[str, Any] = {"role": role, "pid": proc.pid}
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
        entry["rc"] = proc.returncode
    except TimeoutError:
        os.kill(proc.pid, 9)  # the C++ lib hung (typically in shutdown/destructors)
        out, err = await proc.communicate()
        entry["rc"] = "killed"
    entry["seconds"] = round(time.monotonic() - t0, 2)
    entry["stdout"] = out.decode(errors="replace").strip()[-2000:]
    entry["stderr"] = err.decode(errors="replace").strip()[-2000:]
    log.append(entry)
    await asyncio.sleep(0.3)  # let the last frames of this child arrive


# --------------------------------------------------------------------------------------------
# selection of golden frames


def _props(fr: Frame) -> dict[str, str]:
    return parse_properties(str(fr.ext.get("properties") or ""))


SELECTION: list[tuple[str, str, Any, str]] = [
    (
        "cpp_get_route",
        "producer",
        lambda f: f.code == 105 and f.ext.get("topic") == TOPIC,
        "GET_ROUTEINFO_BY_TOPIC (105) for TopicTest, the producer's first frame",
    ),
    (
        "cpp_send_message",
        "producer",
        lambda f: f.code == 10 and f.body == SYNC_BODY,
        "SEND_MESSAGE (10), sync send: tags TagA, keys key1, user property myprop=v1",
    ),
    (
        "cpp_send_batch",
        "producer",
        lambda f: f.code == 10 and str(f.ext.get("batch")) == "1",
        'SEND_MESSAGE (10) with batch "1": two entries (batch-1, batch-2; TagB; bkey1/bkey2)',
    ),
    (
        "cpp_send_compressed",
        "producer",
        lambda f: f.code == 10 and int(f.ext.get("sysFlag", 0)) & 1 == 1,
        "SEND_MESSAGE (10) of a 5000-byte body (b'x'*5000): sysFlag 1, zlib body",
    ),
    (
        "cpp_send_oneway",
        "producer",
        lambda f: f.code == 10 and f.body == ONEWAY_BODY,
        "SEND_MESSAGE (10) from send_oneway (flag 0 on the wire, like a sync send)",
    ),
    (
        "cpp_heartbeat_producer",
        "producer",
        lambda f: f.code == 34,
        "HEART_BEAT (34) of the producer: producerDataSet only",
    ),
    (
        "cpp_unregister_client",
        "producer",
        lambda f: f.code == 35,
        "UNREGISTER_CLIENT (35) sent by Producer.shutdown()",
    ),
    (
        "cpp_get_route_retry",
        "push",
        lambda f: f.code == 105 and str(f.ext.get("topic", "")).startswith("%RETRY%"),
        "GET_ROUTEINFO_BY_TOPIC (105) for %RETRY%<group> from the push consumer",
    ),
    (
        "cpp_heartbeat_consumer",
        "push",
        lambda f: f.code == 34,
        "HEART_BEAT (34) of the push consumer subscribed with 'TagA || TagB'",
    ),
    ("cpp_get_consumer_list", "push", lambda f: f.code == 38, "GET_CONSUMER_LIST_BY_GROUP (38)"),
    ("cpp_query_consumer_offset", "push", lambda f: f.code == 14, "QUERY_CONSUMER_OFFSET (14)"),
    (
        "cpp_pull_message",
        "push",
        lambda f: f.code == 11 and f.ext.get("topic") == TOPIC,
        "PULL_MESSAGE (11) of the push consumer (long-polling, subscription 'TagA || TagB')",
    ),
    (
        "cpp_update_consumer_offset",
        "push",
        lambda f: f.code == 15,
        "UPDATE_CONSUMER_OFFSET (15), periodic/shutdown offset commit",
    ),
    (
        "cpp_unregister_client_consumer",
        "push",
        lambda f: f.code == 35,
        "UNREGISTER_CLIENT (35) sent by PushConsumer.shutdown()",
    ),
    (
        "cpp_lock_batch_mq",
        "orderly",
        lambda f: f.code == 41,
        "LOCK_BATCH_MQ (41) of the orderly push consumer",
    ),
    (
        "cpp_unlock_batch_mq",
        "orderly",
        lambda f: f.code == 42,
        "UNLOCK_BATCH_MQ (42) of the orderly push consumer",
    ),
    (
        "cpp_pull_message_pullconsumer",
        "pull",
        lambda f: f.code == 11,
        "PULL_MESSAGE (11) from PullConsumer (C API Pull())",
    ),
    (
        "cpp_heartbeat_pullconsumer",
        "pull",
        lambda f: f.code == 34,
        "HEART_BEAT (34) of the PullConsumer: consumeType 0, no subscriptionDataSet",
    ),
    (
        "cpp_consumer_send_msg_back",
        "retry",
        lambda f: f.code == 36,
        "CONSUMER_SEND_MSG_BACK (36) after the listener returned RECONSUME_LATER for a served message",
    ),
    (
        "cpp_get_max_offset",
        "broadcast",
        lambda f: f.code == 30,
        "GET_MAX_OFFSET (30) of a BROADCASTING push consumer starting without a local offset",
    ),
]


def describe(fr: Frame) -> dict[str, Any]:
    (word,) = struct.unpack(">i", fr.raw[4:8])
    return {
        "code": fr.code,
        "total_length": len(fr.raw),
        "length_field": len(fr.raw) - 4,
        "header_word": f"0x{word:08X}",
        "header_length": word & 0xFFFFFF,
        "serialize_type": word >> 24,
        "header_ends_with_newline": fr.raw[8 + (word & 0xFFFFFF) - 1 : 8 + (word & 0xFFFFFF)] == b"\n",
        "header": fr.header,
        "body_length": len(fr.body),
        "ext_types": {k: type(v).__name__ for k, v in fr.ext.items()},
        "phase": fr.phase,
        "seq": fr.seq,
        "conn": fr.conn,
    }


def write_selection(frames: list[Frame], out: str, children: list[dict[str, Any]]) -> dict[str, Any]:
    os.makedirs(out, exist_ok=True)
    index: dict[str, Any] = {}
    missing = []
    for name, phase, pred, desc in SELECTION:
        fr = next((f for f in frames if f.phase == phase and pred(f)), None)
        if fr is None:
            missing.append(name)
            continue
        with open(os.path.join(out, name + ".bin"), "wb") as fh:
            fh.write(fr.raw)
        index[name] = {"description": desc, **describe(fr)}
    meta = {
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "client": "PyPI rocketmq==0.4.4 (librocketmq.so, C++ 1.2.3 behaviour)",
        "python": sys.version.split()[0],
        "missing": missing,
        "children": children,
        "sequence": [
            [round(f.t - frames[0].t, 3) if frames else 0, f.phase, f.conn, f.code, f.ext.get("topic")]
            for f in frames
        ],
    }
    with open(os.path.join(out, "index.json"), "w") as fh:
        json.dump({"_meta": meta, **index}, fh, indent=1, sort_keys=False, default=str)
        fh.write("\n")
    return {"written": sorted(index), "missing": missing}


async def capture(out: str, keep_all: str | None) -> None:
    srv = FakeServer(serve=False, serve_topics=frozenset({SERVED_TOPIC}), pull_hold=1.0)
    server = await srv.start()
    children: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        await _run_child(srv, "producer", 2.0, 15, children)
        await _run_child(srv, "push", 8.0, 16, children)
        await _run_child(srv, "orderly", 5.0, 12, children)
        await _run_child(srv, "pull", 1.0, 8, children)
        await _run_child(srv, "retry", 3.0, 10, children)
        await _run_child(srv, "broadcast", 2.0, 8, children)
    finally:
        server.close()
    summary = write_selection(srv.frames, out, children)
    if keep_all:
        os.makedirs(keep_all, exist_ok=True)
        for f in srv.frames:
            with open(os.path.join(keep_all, f"{f.seq:04d}_{f.phase}_{f.code}.bin"), "wb") as fh:
                fh.write(f.raw)
    summary["frames"] = len(srv.frames)
    summary["seconds"] = round(time.monotonic() - t0, 1)
    summary["children"] = [{k: c[k] for k in ("role", "pid", "rc", "seconds", "stdout")} for c in children]
    print(json.dumps(summary, indent=1))


async def serve_forever(port: int, duration: float, pull_hold: float) -> None:
    srv = FakeServer(serve=True, pull_hold=pull_hold)
    server = await srv.start(port)
    print(f"listening on {srv.addr}", flush=True)
    try:
        await asyncio.sleep(duration)
    finally:
        server.close()
    print(
        json.dumps(
            {
                "frames": len(srv.frames),
                "codes": sorted({f.code for f in srv.frames}),
                "stored": {f"{t}:{q}": len(v) for (t, q), v in srv.queues.items()},
                "offsets": {f"{g}|{t}|{q}": o for (g, t, q), o in srv.offsets.items()},
            }
        ),
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="directory for the selected .bin files")
    ap.add_argument("--keep-all", metavar="DIR", help="also dump every captured frame into DIR")
    ap.add_argument("--serve", action="store_true", help="serve mode: fake broker with a message store")
    ap.add_argument("--port", type=int, default=0, help="serve mode: port (0 = free port)")
    ap.add_argument("--duration", type=float, default=60.0, help="serve mode: seconds to run")
    ap.add_argument("--pull-hold", type=float, default=1.0, help="hold time of suspendable pulls")
    ap.add_argument(
        "--child",
        choices=["producer", "push", "orderly", "pull", "retry", "broadcast"],
        help=argparse.SUPPRESS,
    )
    ap.add_argument("--namesrv", help=argparse.SUPPRESS)
    ap.add_argument("--run-seconds", type=float, default=1.0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(a.child, a.namesrv, a.run_seconds)
    elif a.serve:
        asyncio.run(serve_forever(a.port, a.duration, a.pull_hold))
    else:
        asyncio.run(capture(a.out, a.keep_all))


if __name__ == "__main__":
    main()
