"""What the message index costs: put and put_batch with and without it, lookups, a full rebuild.

    .venv/bin/python bench/index.py [--count 20000] [--rounds 8] [--dir PATH]

- `MessageStore.put` of a 1 KiB message carrying a UNIQ_KEY (what every client sends), and
  `put_batch` of 32 such messages, on two stores: `message_index_enable` on and off. Rounds
  alternate between the two stores; the best round of each is printed (the machine is noisy).
- `IndexService.add` alone (one UNIQ_KEY) and `add_keys` of 32.
- a unique-key lookup (`query_messages`) among the --count messages;
- a full rebuild of the index (``index/`` deleted) over the log, per record.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import tempfile
import time
import timeit
import uuid
from pathlib import Path

from cometmq.protocol.properties import encode_properties
from cometmq.protocol.record import encode_host
from cometmq.store import MessageBatch, MessageStore, MessageToStore, StoreConfig

BATCH = 32
TOPIC = "BenchTopic"


def message(body: bytes) -> MessageToStore:
    uniq = uuid.uuid4().hex.upper()
    props = encode_properties({"UNIQ_KEY": uniq, "TAGS": "TagA", "CLUSTER": "DefaultCluster", "WAIT": "true"})
    return MessageToStore(
        topic=TOPIC,
        queue_id=0,
        flag=0,
        body=body,
        properties=props,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,  # one for all: a batch shares its born timestamp
        born_host=encode_host("10.0.0.2", 50000),
        store_host=encode_host("10.0.0.1", 10911),
        uniq_key=uniq,
    )


def per_call_us(fn: object, number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=20_000, help="messages per round (20000)")
    parser.add_argument("--rounds", type=int, default=8, help="rounds per store (8)")
    parser.add_argument("--dir", default=None, help="where the temp stores go (default: the system temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cometmq-bench-index-", dir=args.dir) as tmp:
        root = Path(tmp)
        stores = {}
        for enable in (True, False):
            store = MessageStore(StoreConfig(root / f"index-{enable}", message_index_enable=enable))
            store.start()
            stores[enable] = store
        body = b"x" * 1024
        msgs = [message(body) for _ in range(args.count)]
        made = [MessageBatch.of([message(body) for _ in range(BATCH)]) for _ in range(args.count // BATCH)]
        batches = [batch for batch in made if batch is not None]
        if len(batches) < len(made):
            raise SystemExit("the bench's messages do not form batches")
        put_us: dict[bool, list[float]] = {True: [], False: []}
        batch_us: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for enable, store in stores.items():
                it = itertools.cycle(msgs)
                put_us[enable].append(per_call_us(lambda s=store, i=it: s.put(next(i)), args.count))
                bi = itertools.cycle(batches)
                batch_us[enable].append(per_call_us(lambda s=store, i=bi: s.put_batch(next(i)), len(batches)))
        for enable in (True, False):
            print(
                f"index {'on ' if enable else 'off'}: put {min(put_us[enable]):.2f} µs, "
                f"put_batch({BATCH}) {min(batch_us[enable]):.1f} µs "
                f"({min(batch_us[enable]) / BATCH:.2f} µs per message)"
            )
        store = stores[True]
        index = store._index
        assert index is not None
        it = itertools.cycle(msgs)
        add = min(
            per_call_us(lambda: index.add(TOPIC, next(it).uniq_key, "", 123, 1_700_000_000_000), args.count)
            for _ in range(5)
        )
        offsets = list(range(0, BATCH * 1200, 1200))
        key_lists = itertools.cycle([batch.index_keys for batch in batches])
        add_keys = min(
            per_call_us(
                lambda: index.add_keys(TOPIC, next(key_lists), offsets, 1_700_000_000_000), len(batches)
            )
            for _ in range(5)
        )
        print(f"IndexService.add (one UNIQ_KEY) {add:.2f} µs, add_keys({BATCH}) {add_keys:.1f} µs")
        entries = sum(f.count for f in index.files)
        wanted = msgs[len(msgs) // 2].uniq_key
        lookup = per_call_us(lambda: store.query_messages(TOPIC, wanted, 32, 0, 2**62, True), 20)
        print(f"unique-key lookup among {entries} entries: {lookup / 1000:.2f} ms")

        records = args.rounds * (args.count + len(batches) * BATCH)
        for enable, each in stores.items():  # a refused put would otherwise pass for a fast one
            if each.max_offset(TOPIC, 0) != records:
                raise SystemExit(f"index {enable}: {each.max_offset(TOPIC, 0)} of {records} messages stored")
        store.shutdown()
        shutil.rmtree(root / "index-True" / "index")
        started = time.perf_counter()
        store = MessageStore(StoreConfig(root / "index-True"))
        store.start()
        elapsed = time.perf_counter() - started
        print(f"full rebuild: {elapsed:.2f} s for {records} records ({elapsed / records * 1e6:.1f} µs each)")
        store.shutdown()
        stores[False].shutdown()


if __name__ == "__main__":
    main()
