"""The official RocketMQ 5.x Python client in subprocesses (tests/rocketmq5/_driver.py), read as it runs.

The client lives in its own venv, ``.venv-rocketmq5`` beside the venv running the tests (test.sh makes it
with scripts/_rocketmq5.sh): its package ``rocketmq`` is also the C++ 4.x client's name in this one.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from processes import subprocess_env
from waiting import DEFAULT_TIMEOUT_S

DRIVER = Path(__file__).with_name("_driver.py")
# A venv's sys.prefix is its directory: the 5.x client's venv is its sibling (ROOT/.venv-rocketmq5).
PYTHON5 = Path(sys.prefix).parent / ".venv-rocketmq5" / "bin" / "python"
# How the client's log directory reads in a failure's message: its last lines say what it saw.
LOG_TAIL_CHARS = 4000

Event = dict[str, Any]

_numbers = itertools.count()


def client5_missing() -> str | None:
    """Why the 5.x client cannot run here, or None when it can."""
    if not PYTHON5.exists():
        return f"{PYTHON5} is missing: `source scripts/_rocketmq5.sh` (test.sh does) creates it"
    return None


class Client5:
    """One run of a driver scenario; its events (one JSON object a line) are read while it runs.

    ``workdir`` gets the process's stderr and, as its HOME, the client's own log."""

    def __init__(
        self, scenario: str, endpoints: str, *args: str, workdir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.scenario = scenario
        self.home = workdir / f"client5-{next(_numbers)}-{scenario}"
        self.home.mkdir(parents=True)
        self.events: list[Event] = []
        self._buffer = b""
        self._stderr = (self.home / "stderr").open("wb")
        environment = {**subprocess_env(), "HOME": str(self.home), **(env or {})}
        environment.pop("PYTHONPATH", None)  # CometMQ's sources: nothing the 5.x client's venv should see
        self.proc = subprocess.Popen(
            [str(PYTHON5), str(DRIVER), scenario, "--endpoints", endpoints, *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=environment,
        )

    def __enter__(self) -> Client5:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _next_event(self, deadline: float) -> Event | None:
        """The next event, or None once the process has ended and said everything."""
        assert self.proc.stdout is not None
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.scenario}: no event in time\n{self.diagnostics()}")
            ready, _, _ = select.select([self.proc.stdout], [], [], min(remaining, 0.5))
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            event: Event = json.loads(line)
        except ValueError as exc:
            raise AssertionError(f"{self.scenario} printed {line!r}\n{self.diagnostics()}") from exc
        self.events.append(event)
        return event

    def wait_for(self, *names: str, timeout: float = DEFAULT_TIMEOUT_S) -> Event:
        """Reads events until one named in *names*; its fields."""
        deadline = time.monotonic() + timeout
        while (event := self._next_event(deadline)) is not None:
            if event["event"] in names:
                return event
            if event["event"] == "done":
                break
        raise AssertionError(f"{self.scenario} ended without {names}\n{self.diagnostics()}")

    def finish(self, timeout: float = 90.0) -> Event:
        """Reads to the ``done`` event and waits for the process to end; the done event."""
        deadline = time.monotonic() + timeout
        done = None
        while (event := self._next_event(deadline)) is not None:
            if event["event"] == "done":
                done = event
        self.proc.wait(max(1.0, deadline - time.monotonic()))
        if done is None:
            raise AssertionError(f"{self.scenario} ended ({self.proc.returncode}) without done\n"
                                 f"{self.diagnostics()}")  # fmt: skip
        return done

    def result(self, timeout: float = 90.0) -> Event:
        """:meth:`finish`, asserting the scenario did all it was asked."""
        done = self.finish(timeout)
        assert done["ok"], f"{self.scenario} failed: {self.named('error')}\n{self.diagnostics()}"
        return done

    def named(self, *names: str) -> list[Event]:
        """The events read so far with one of these names."""
        return [event for event in self.events if event["event"] in names]

    def diagnostics(self) -> str:
        """Its events so far, stderr and the end of the client's log, for a failure's message."""
        self._stderr.flush()
        stderr = (self.home / "stderr").read_text(errors="replace")
        return (f"events: {self.events[-20:]}\nstderr:\n{stderr[-LOG_TAIL_CHARS:]}\n"
                f"client log:\n{self.client_log()[-LOG_TAIL_CHARS:]}")  # fmt: skip

    def client_log(self) -> str:
        """What the client logged (it logs the status of a refused call that it then reports vaguely)."""
        logs = sorted((self.home / "logs").rglob("*.log")) if (self.home / "logs").exists() else []
        return "".join(path.read_text(errors="replace") for path in logs)

    def close(self) -> None:
        """Kills it if it still runs (a test that failed half-way)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()


def run5(
    scenario: str,
    endpoints: str,
    *args: str,
    workdir: Path,
    timeout: float = 90.0,
    env: dict[str, str] | None = None,
) -> Client5:
    """Runs a scenario to its end and asserts it succeeded; the finished run (its events)."""
    with Client5(scenario, endpoints, *args, workdir=workdir, env=env) as client:
        client.result(timeout)
    return client


class Scenarios:
    """The driver's scenarios against one proxy, their processes' files under *workdir*; each run ends
    before its method returns and asserts that it succeeded (:meth:`start` runs one in the background)."""

    def __init__(self, endpoints: str, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.endpoints = endpoints
        self.workdir = workdir
        self.env = env

    def start(self, scenario: str, topic: str, *args: str) -> Client5:
        return Client5(scenario, self.endpoints, "--topic", topic, *args, workdir=self.workdir, env=self.env)

    def run(self, scenario: str, topic: str, *args: str, timeout: float = 90.0) -> Client5:
        return run5(
            scenario,
            self.endpoints,
            "--topic",
            topic,
            *args,
            workdir=self.workdir,
            timeout=timeout,
            env=self.env,
        )

    def produce(self, topic: str, *args: str) -> Client5:
        return self.run("produce", topic, *args)

    def transaction(self, topic: str, *args: str) -> Client5:
        return self.run("transaction", topic, *args)

    def simple_consume(self, topic: str, group: str, *args: str, timeout: float = 90.0) -> Client5:
        return self.run("simple-consume", topic, "--group", group, *args, timeout=timeout)

    def push_consume(self, topic: str, group: str, *args: str) -> Client5:
        return self.run("push-consume", topic, "--group", group, *args)
