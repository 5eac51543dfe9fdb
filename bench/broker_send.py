"""The broker's CPU per message for a send, in process: frame decoding, SendProcessor, the store, the reply.

    .venv/bin/python bench/broker_send.py [--batches 2000] [--batch 100] [--size 1024] [--rounds 3]

A broker (its store started, no sockets) takes SEND_BATCH_MESSAGE frames exactly as the native
producer encodes them (1 KiB bodies; UNIQ_KEY and TAGS per message) through `FrameDecoder`, its
`SendProcessor` and the encoding of each reply; the same batches to a BatchCQ topic (each stored as one
inner-batch record); then a tenth as many single SEND_MESSAGE_V2 frames. Prints
the CPU time per message of the thread doing that work, in user mode and in the kernel (first-touch
page faults of the commit log), and of the whole process (the flush thread too); each figure is its
median over --rounds rounds.

This is the broker's share of `cometmq bench produce`, without the client, sockets or scheduling
around it: 200 000 msg/s of batched produce on one core needs about 5 µs here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import tempfile
import time

from cometmq.broker._send import SendProcessor
from cometmq.broker.broker import Broker
from cometmq.broker.config import BrokerConfig
from cometmq.client import Message, Producer
from cometmq.client._brokerapi import send_header
from cometmq.protocol import FrameDecoder, RemotingCommand, RequestCode, encode_bytes
from cometmq.protocol.codec import encode
from cometmq.protocol.topic_config import TopicConfig
from cometmq.remoting.transport import Connection

TOPIC = "BenchSend"
INNER_BATCH_TOPIC = "BenchSendInnerBatch"


async def _peer() -> Connection:
    """A connection without a socket: SendProcessor reads only its address (the born host). A real
    Connection rather than a stand-in: on a build where mypyc compiled the transport too
    (bench/mypyc_build.py), the compiled send handler accepts nothing else."""
    conn = Connection(None)
    conn.remote_address = "127.0.0.1:50000"
    return conn


def _frames(producer: Producer, batch: int, size: int) -> tuple[bytes, bytes, bytes]:
    bodies = [os.urandom(size) for _ in range(16)]
    batch_frames = []
    for topic in (TOPIC, INNER_BATCH_TOPIC):
        messages = [Message(topic, bodies[i % 16], tags="TagA") for i in range(batch)]
        _, parts, _, ids = producer._encode_batch(messages)
        # The batch's own UNIQ_KEY, as the producer sends it (what makes a BatchCQ topic store one record).
        header = send_header("bench", topic, f"UNIQ_KEY\x01{ids[0]}B\x02", batch=True, queue_id=0)
        batch_frames.append(
            encode_bytes(
                RemotingCommand(
                    code=RequestCode.SEND_BATCH_MESSAGE,
                    ext_fields=header.encode(compact=True),
                    body=b"".join(parts),
                )
            )
        )
    body, _, text, _ = producer._prepare(Message(TOPIC, bodies[0], tags="TagA"))
    single = RemotingCommand(
        code=RequestCode.SEND_MESSAGE_V2,
        ext_fields=send_header("bench", TOPIC, text, queue_id=0).encode(compact=True),
        body=body,
    )
    return batch_frames[0], batch_frames[1], encode_bytes(single)


def _cpu() -> tuple[float, float, float]:
    """CPU seconds: this thread's in user mode, this thread's in the kernel, the whole process's."""
    thread = resource.getrusage(resource.RUSAGE_THREAD)
    return thread.ru_utime, thread.ru_stime, time.process_time()


def _run(processor: SendProcessor, peer: Connection, frame: bytes, frames: int) -> tuple[float, float, float]:
    decoder = FrameDecoder()
    before = _cpu()
    for _ in range(frames):
        for request in decoder.feed(frame):
            response = processor.send_message_v2(peer, request)
            assert isinstance(response, RemotingCommand) and response.code == 0, response
            encode(response)
    after = _cpu()
    user, system, process = (b - a for a, b in zip(before, after, strict=True))
    return user, system, process


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=2000, help="batch frames per round (2000)")
    parser.add_argument("--batch", type=int, default=100, help="messages per batch (100, as cometmq bench)")
    parser.add_argument("--size", type=int, default=1024, help="body bytes (1024)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each figure's median is printed (3)")
    parser.add_argument("--dir", default=None, help="where the store goes (a temp dir by default)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        broker = Broker(BrokerConfig(store_path_root_dir=root))
        broker.topics.load()
        broker.groups.load()
        broker.store.start()
        try:
            broker.topics.on_batch_topic = broker.store.declare_batch_topic
            broker.topics.create_in_send(TOPIC, "TBW102", 4)
            broker.topics.put(TopicConfig(INNER_BATCH_TOPIC, 4, 4, attributes={"queue.type": "BatchCQ"}))
            processor = SendProcessor(broker)
            peer = asyncio.run(_peer())
            producer = Producer("bench", "127.0.0.1:9876")
            batch_frame, inner_batch_frame, single_frame = _frames(producer, args.batch, args.size)
            _run(processor, peer, batch_frame, 10)  # warm-up
            rows = []
            for name, frame, frames, per_frame in (
                (f"SEND_BATCH_MESSAGE of {args.batch}", batch_frame, args.batches, args.batch),
                ("  the same to a BatchCQ topic", inner_batch_frame, args.batches, args.batch),
                ("SEND_MESSAGE_V2", single_frame, args.batches * args.batch // 10, 1),
            ):
                runs = [_run(processor, peer, frame, frames) for _ in range(args.rounds)]
                messages = frames * per_frame
                medians = [statistics.median(column) for column in zip(*runs, strict=True)]
                rows.append((name, *(seconds / messages * 1e6 for seconds in medians)))
        finally:
            broker.store.shutdown()
    print("CPU µs per message")
    print(f"{'workload':<28} {'thread, user':>13} {'thread, kernel':>15} {'process':>8}")
    for name, user_us, system_us, process_us in rows:
        print(f"{name:<28} {user_us:>13.2f} {system_us:>15.2f} {process_us:>8.2f}")


if __name__ == "__main__":
    main()
