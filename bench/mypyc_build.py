"""Build a copy of CometMQ with its modules compiled to C by mypyc, to benchmark beside the pure one.

    .venv/bin/python bench/mypyc_build.py [--out DIR] [--only cometmq/protocol/codec.py ...]

Copies src/ to OUT/src (OUT is $TMPDIR/cometmq-mypyc by default) and compiles there, in place, every
module of the protocol and remoting layers, the store, the broker, the clients, the name server
and the errors that mypyc can compile today (see NOT_COMPILED): each ``.so`` sits beside its ``.py``.
The checkout itself is not touched, and no mypy configuration applies (OUT is outside the checkout).
On stdout it prints only the directory to put first on PYTHONPATH, so that a broker and a bench run
the compiled copy:

    COMPILED=$(.venv/bin/python bench/mypyc_build.py) || exit 1
    PYTHONPATH=$COMPILED .venv/bin/python -m cometmq standalone --data-dir /tmp/compiled &
    PYTHONPATH=$COMPILED .venv/bin/python -m cometmq bench latency

Building everything takes about 2.5 minutes on one core (one large C file). docs/performance.md has the
figures measured with it and what stands between this and a compiled CometMQ users get by default.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Left in OUT by a build, so that a later one replaces only what a build made.
MARKER = ".cometmq-mypyc-build"

# The packages whose code runs per message, on the broker and on the clients.
PACKAGES = ("protocol", "remoting", "store", "broker", "client", "namesrv")

# What mypyc cannot compile yet (mypy 2.4), and why; these stay Python, as do the packages'
# __init__ files (re-exports only).
NOT_COMPILED = {
    "cometmq/broker/sql92.py": "_Long subclasses int; its NamedTuple fails at import (KeyError)",
    "cometmq/client/blocking.py": "statements in class bodies",
    "cometmq/client/litepull.py": "an async generator (LitePullConsumer.read)",
    "cometmq/client/message.py": "decode_pulled makes ReceivedMessage with __new__, not __init__",
    "cometmq/client/_instance.py": "weak references to ClientInstance (native classes have none)",
    "cometmq/remoting/transport.py": "weak references to RemotingClient (native classes have none)",
    # Header classes get decode/encode generated at import (exec) and set on the class.
    "cometmq/protocol/headers.py": "Header's subclasses are made by a decorator (dataclass_transform)",
    "cometmq/protocol/broker_headers.py": "non-extension classes may not inherit from extension classes",
}


def compiled_modules() -> list[str]:
    """The module files compiled by default, relative to src/."""
    src = ROOT / "src"
    files = [src / "cometmq" / "errors.py"]
    for package in PACKAGES:
        files += sorted((src / "cometmq" / package).glob("*.py"))
    relative = [str(path.relative_to(src)) for path in files]
    return [name for name in relative if name not in NOT_COMPILED and not name.endswith("__init__.py")]


def build(out: Path, modules: list[str]) -> Path:
    """Copy src/ to *out*/src and compile *modules* there; returns that src directory."""
    if out == ROOT or out in ROOT.parents or ROOT in out.parents:
        raise SystemExit(f"mypyc_build: --out {out} must be outside the checkout {ROOT}")
    src = out / "src"
    if src.exists():
        if not (out / MARKER).exists():
            raise SystemExit(f"mypyc_build: {src} exists and is not an earlier build's; choose another --out")
        shutil.rmtree(src)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).touch()
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
    with tempfile.TemporaryDirectory() as work:
        # mypyc writes its C files and setuptools its objects under the working directory's build/;
        # the extensions land beside their sources (--inplace, relative to src).
        setup = Path(work) / "setup.py"
        setup.write_text(
            "from setuptools import setup\n"
            "from mypyc.build import mypycify\n"
            f"setup(name='cometmq-compiled', ext_modules=mypycify({modules!r}, group_name='cometmq'),\n"
            f"      script_args=['build_ext', '--inplace', '--build-temp', {str(Path(work) / 'tmp')!r}])\n"
        )
        log = Path(work) / "build.log"
        try:
            with log.open("w") as output:
                done = subprocess.run(
                    [sys.executable, str(setup)],
                    cwd=src,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    check=False,
                )
        finally:
            shutil.rmtree(src / "build", ignore_errors=True)  # mypyc's C files
        if done.returncode != 0:
            sys.stderr.write(log.read_text()[-4000:])
            raise SystemExit(f"mypyc_build: the build failed (exit {done.returncode}), log above")
    return src


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "cometmq-mypyc",
        help="where the copy goes, outside the checkout ($TMPDIR/cometmq-mypyc)",
    )
    parser.add_argument(
        "--only", nargs="+", metavar="FILE", help="compile just these module files (relative to src/)"
    )
    args = parser.parse_args()
    modules = args.only or compiled_modules()
    print(f"mypyc_build: compiling {len(modules)} modules into {args.out / 'src'} ...", file=sys.stderr)
    src = build(args.out.resolve(), modules)
    compiled = sum(1 for _ in src.rglob("*.so"))
    print(f"mypyc_build: done, {compiled} extension files", file=sys.stderr)
    print(os.fspath(src))


if __name__ == "__main__":
    main()
