"""Record the request frames the official C++ client (rocketmq==0.4.4) sends, for the fuzz test's seeds.

    .venv/bin/python tests/fuzz/record_cpp_frames.py [--out tests/fuzz/cpp_frames.jsonl]

Starts a name server and a broker in child processes, puts a recording TCP proxy in front of each (the
broker listens on 127.0.0.2 and advertises 127.0.0.1, where its proxy listens on the same port, so the
route the C++ client reads leads it through the proxy), runs the C++ scenarios of
tests/interop/_cpp_scenarios.py (sync, oneway, batch and orderly sends; push and pull consumers) and
writes every whole frame the client sent, as one JSON line each: the request code and the frame
(length prefix included) in base64. Frames are kept at most ``--per-kind`` times per kind
(request code, header field names, batch or not).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
sys.path.insert(0, str(FUZZ.parent))

from cometmq.protocol import decode_frame  # noqa: E402
from processes import ServerProcess, free_port  # noqa: E402

SCENARIOS = FUZZ.parent / "interop" / "_cpp_scenarios.py"
TOPIC = "FuzzSeeds"


class Recorder:
    """Splits the client's byte stream of each proxied connection into frames and keeps them."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    async def proxy(self, listen: tuple[str, int], target: tuple[str, int]) -> asyncio.Server:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
            await asyncio.gather(
                self._pump(reader, upstream_writer, record=True),
                self._pump(upstream_reader, writer, record=False),
                return_exceptions=True,
            )

        return await asyncio.start_server(serve, *listen)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: bool) -> None:
        pending = b""
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
                if not record:
                    continue
                pending += data
                while len(pending) >= 4:
                    (length,) = struct.unpack_from(">i", pending)
                    if len(pending) < 4 + length:
                        break
                    self.frames.append(pending[: 4 + length])
                    pending = pending[4 + length :]
        finally:
            writer.close()


def cpp(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCENARIOS), *args], capture_output=True, text=True, timeout=180, check=False
    )
    print(f"{args[0]}: {done.stdout.strip().splitlines()[-1:]}", file=sys.stderr)


async def record(per_kind: int) -> list[tuple[int, bytes]]:
    recorder = Recorder()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        namesrv_port, broker_port, proxy_port = free_port(), free_port(), free_port()
        namesrv = ServerProcess(
            ["namesrv", "--host", "127.0.0.1", "--port", str(namesrv_port)], root / "ns.log"
        )
        conf = root / "broker.conf"
        conf.write_text(
            f"brokerIP1=127.0.0.1\nlistenHost=127.0.0.2\nlistenPort={broker_port}\n"
            f"namesrvAddr=127.0.0.1:{namesrv_port}\nmappedFileSizeCommitLog=4194304\n"
        )
        broker = ServerProcess(["broker", "-c", str(conf), "--data-dir", str(root / "data")], root / "b.log")
        try:
            namesrv.wait_ready("CometMQ namesrv ready:")
            broker.wait_ready("CometMQ broker ready:")
            servers = [
                await recorder.proxy(("127.0.0.1", proxy_port), ("127.0.0.1", namesrv_port)),
                await recorder.proxy(("127.0.0.1", broker_port), ("127.0.0.2", broker_port)),
            ]
            ns = f"127.0.0.1:{proxy_port}"
            runs = [
                "produce --count 6 --mode sync --tags TagA --keys-prefix k --prop color=red",
                "produce --count 4 --mode oneway",
                "produce --count 6 --mode batch --batch-size 3",
                "produce --count 4 --mode orderly --sharding-key 7",
                "produce --count 2 --mode sync --delay-level 2",
                "push-consume --expect 20 --timeout 30 --allow-fewer",
                "push-consume --expect 6 --timeout 30 --orderly --allow-fewer --group GID_fuzz_orderly "
                "--expression TagA||TagB",
                "pull-consume --timeout 20",
            ]
            for run in runs:
                scenario, *options = run.split()
                await asyncio.to_thread(cpp, scenario, "--namesrv", ns, "--topic", TOPIC, *options)
            for server in servers:
                server.close()
        finally:
            broker.terminate()
            namesrv.terminate()
    kept: list[tuple[int, bytes]] = []
    seen: Counter[tuple[object, ...]] = Counter()
    for frame in recorder.frames:
        command = decode_frame(frame[4:])
        # Frames of one kind: one request code, the same header fields, batch or not.
        kind = (command.code, *sorted(command.ext_fields), command.ext_fields.get("batch"))
        if seen[kind] >= per_kind:
            continue
        seen[kind] += 1
        kept.append((command.code, frame))
    codes = Counter(code for code, _ in kept)
    print(f"recorded {len(recorder.frames)} frames, kept {len(kept)}: {dict(codes)}", file=sys.stderr)
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=FUZZ / "cpp_frames.jsonl")
    parser.add_argument("--per-kind", type=int, default=3, help="frames kept per kind of request (3)")
    args = parser.parse_args()
    kept = asyncio.run(record(args.per_kind))
    with args.out.open("w") as out:
        for code, frame in kept:
            out.write(json.dumps({"code": code, "frame": base64.b64encode(frame).decode()}) + "\n")


if __name__ == "__main__":
    main()
