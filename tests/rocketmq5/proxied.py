"""Servers with the gRPC proxy in front, for the 5.x client: a standalone (its own proxy) and a cluster of a
name server, two brokers and a ``cometmq proxy``, each a process of its own, so one broker can be killed."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from processes import (
    TEST_BROKER_CONF,
    ServerProcess,
    StandaloneServer,
    cometmq,
    free_port,
    proxy_address,
    proxy_args,
)


def admin(namesrv: str, *args: str) -> str:
    """One ``cometmq`` admin command against *namesrv* that must succeed; its output."""
    done = cometmq(*args, "-n", namesrv)
    assert done.returncode == 0, f"cometmq {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def kill9(server: ServerProcess) -> None:
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    server.terminate()  # closes its pipe and log


class ProxiedStandalone(StandaloneServer):
    """``cometmq standalone`` serving its proxy at ``endpoints`` (a port chosen once: a restart keeps it)."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        super().__init__(data_dir, *proxy_args(), *extra)
        self.endpoints = ""

    def start(self) -> None:
        super().start()
        assert self.process is not None
        self.endpoints = proxy_address(self.process)


class ProxiedCluster:
    """A name server, brokers broker-a and broker-b (ports chosen once: a restarted broker comes back
    where it was) and ``cometmq proxy --namesrv``, all on loopback, data and logs under *workdir*."""

    BROKERS = ("broker-a", "broker-b")

    def __init__(self, workdir: Path, broker_conf: str = "") -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.conf = workdir / "broker.conf"
        self.conf.write_text(TEST_BROKER_CONF + broker_conf)
        self.brokers: dict[str, ServerProcess | None] = dict.fromkeys(self.BROKERS)
        self.broker_ports = {name: free_port() for name in self.BROKERS}
        self.proxy: ServerProcess | None = None
        self.namesrv_process = ServerProcess(
            ["namesrv", "--host", "127.0.0.1", "--port", "0"], workdir / "namesrv.log"
        )
        try:
            line = self.namesrv_process.wait_ready("CometMQ namesrv ready:")
            found = re.search(r"listening on ([^\s,]+)", line)
            assert found is not None, line
            self.namesrv = found.group(1)
            for name in self.BROKERS:
                self.start_broker(name)
            self.proxy = ServerProcess(
                ["proxy", "--namesrv", self.namesrv, "--port", "0"], workdir / "proxy.log"
            )
            self.proxy.wait_ready("CometMQ proxy ready:")
            self.endpoints = proxy_address(self.proxy)
        except BaseException:
            self.stop()
            raise

    def start_broker(self, name: str) -> None:
        broker = ServerProcess(
            ["broker", "-n", self.namesrv, "-c", str(self.conf), "--host", "127.0.0.1",
             "--port", str(self.broker_ports[name]), "--broker-name", name,
             "--data-dir", str(self.workdir / name)],
            self.workdir / f"{name}.log",
        )  # fmt: skip
        self.brokers[name] = broker
        broker.wait_ready("CometMQ broker ready:")

    def kill9_broker(self, name: str) -> None:
        broker = self.brokers[name]
        assert broker is not None
        kill9(broker)
        self.brokers[name] = None

    def broker_address(self, name: str) -> str:
        return f"127.0.0.1:{self.broker_ports[name]}"

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.terminate()
        for broker in self.brokers.values():
            if broker is not None:
                broker.terminate()
        self.namesrv_process.terminate()
