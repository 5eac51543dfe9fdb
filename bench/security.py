"""What access control and TLS cost: `cometmq bench produce|consume|latency` against four standalone
servers side by side — plain, ACL on, TLS on, and both — in one run.

    .venv/bin/python bench/security.py [--rounds 3] [--count 200000] [--dir PATH] [--quick]

Each server is a `cometmq standalone` with default settings but for small store files. With ACL, the
client signs every request as a Normal user of a plain_acl.yml that may Pub and Sub on every topic
and group (not a Super user, so every request is also authorized against its permissions); the
topics are created beforehand by a Super user. With TLS, the server is in tls.server.mode=enforcing
with a certificate from a test CA (trustme), and the client verifies it. The rounds interleave the
four servers, so a slow spell of the machine touches all of them alike; each figure is the median
over the rounds, and each ratio is against the plain server's figure of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]

from processes import TEST_BROKER_CONF, ServerProcess, start_standalone  # noqa: E402
from tls_support import Certificates, make_certificates  # noqa: E402

VARIANTS = ("plain", "acl", "tls", "acl+tls")
SUPER = ("bench-admin", "bench-admin-secret")
NORMAL = ("bench-user", "bench-user-secret")

PLAIN_ACL = f"""\
accounts:
  - accessKey: {SUPER[0]}
    secretKey: {SUPER[1]}
    admin: true
  - accessKey: {NORMAL[0]}
    secretKey: {NORMAL[1]}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def write_conf(root: Path, variant: str, certs: Certificates) -> Path:
    keys: dict[str, str] = {}
    if "acl" in variant:
        (root / "plain_acl.yml").write_text(PLAIN_ACL)
        keys |= {
            "aclEnable": "true",
            "plainAclFile": str(root / "plain_acl.yml"),
            "innerClientAuthenticationCredentials": json.dumps(
                {"accessKey": SUPER[0], "secretKey": SUPER[1]}
            ),
        }
    if "tls" in variant:
        # tls.enable: the broker's registration with its own name server goes over TLS too.
        keys |= certs.server_properties("enforcing") | certs.client_properties()
    conf = root / "broker.conf"
    conf.write_text(TEST_BROKER_CONF + "".join(f"{key}={value}\n" for key, value in keys.items()))
    return conf


def client_env(variant: str, certs: Certificates, user: tuple[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMETMQ_")}
    if "acl" in variant:
        env["COMETMQ_ACCESS_KEY"], env["COMETMQ_SECRET_KEY"] = user
    if "tls" in variant:
        env["COMETMQ_TLS"] = "1"
        env["COMETMQ_TLS_CA"] = str(certs.ca)
    return env


def cometmq(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cometmq", *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"cometmq {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=200_000, help="messages per produce/consume run")
    parser.add_argument("--dir", type=Path, help="where the servers keep their data (default: a temp dir)")
    parser.add_argument(
        "--quick", action="store_true", help="1 round of 20 000 messages, short latency runs (a smoke test)"
    )
    args = parser.parse_args()
    args.latency = []
    if args.quick:
        args.rounds, args.count = 1, 20_000
        args.latency = ["--count", "500", "--duration", "2"]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        certs = make_certificates(root / "certs")
        servers: dict[str, tuple[ServerProcess, str]] = {}
        try:
            for variant in VARIANTS:
                home = root / variant.replace("+", "-")
                home.mkdir()
                servers[variant] = start_standalone(home / "data", write_conf(home, variant, certs))
            figures = run(args, servers, certs)
        finally:
            for server, _ in servers.values():
                server.terminate()
    report(figures)
    return 0


Figures = dict[str, dict[str, list[float]]]  # variant → figure → one value per round


def run(
    args: argparse.Namespace, servers: dict[str, tuple[ServerProcess, str]], certs: Certificates
) -> Figures:
    figures: Figures = {variant: {} for variant in VARIANTS}
    for variant, (_, namesrv) in servers.items():  # topics made by a Super user: a Normal one may not
        env = client_env(variant, certs, SUPER)
        for topic in ("BenchThroughput", "BenchLatency"):
            cometmq(["topic", "create", topic, "--namesrv", namesrv, "--queues", "4"], env)
    for round_no in range(args.rounds):
        for variant, (_, namesrv) in servers.items():
            env = client_env(variant, certs, NORMAL)
            common = ["--namesrv", namesrv, "--json"]
            workloads = [
                ["produce", "--topic", "BenchThroughput", "--count", str(args.count)],
                ["consume", "--topic", "BenchThroughput", "--count", str(args.count)],
                ["latency", "--topic", "BenchLatency", "--no-floor", *args.latency],
            ]
            for workload in workloads:
                result = json.loads(cometmq(["bench", *workload, *common], env))
                for row in result["rows"]:
                    for key in ("msg_per_s", "p50_us", "p99_us"):
                        if key in row:
                            figures[variant].setdefault(f"{row['workload']} {key}", []).append(row[key])
            print(f"round {round_no + 1}/{args.rounds}: {variant} done", file=sys.stderr, flush=True)
    return figures


def report(figures: Figures) -> None:
    names = list(figures["plain"])
    print(f"{'figure':<48}" + "".join(f"{variant:>18}" for variant in VARIANTS))
    for name in names:
        plain = statistics.median(figures["plain"][name])
        cells = []
        for variant in VARIANTS:
            value = statistics.median(figures[variant][name])
            ratio = "" if variant == "plain" else f" ({value / plain:.2f}x)"
            cells.append(f"{value:>10,.0f}{ratio:>8}")
        print(f"{name:<48}" + "".join(cells))
    print(json.dumps({v: {k: statistics.median(x) for k, x in f.items()} for v, f in figures.items()}))


if __name__ == "__main__":
    sys.exit(main())
