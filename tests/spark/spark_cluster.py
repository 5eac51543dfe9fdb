"""A Spark standalone cluster for tests (and bench/spark.py): a master and one worker started with
``spark-class`` on loopback ports chosen free, small memory, this interpreter for Python workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from spark_support import spark_env

from processes import free_port, subprocess_env
from waiting import wait_until_blocking

WORKER_CORES = 2
WORKER_MEMORY = "1g"  # executors take 512m (pipeline.spark_session)
START_TIMEOUT_S = 120.0
# Far more than an executor takes to start on a loaded machine, far less than a test's timeout.
EXECUTOR_WAIT_S = 60.0


def spark_home() -> Path:
    """PySpark's installation, which is a Spark distribution (bin/, jars/) of its own."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkCluster:
    """``start()`` the master and its worker under ``workdir`` (logs, worker and local dirs);
    ``master_url`` is what a SparkSession's master is set to; ``stop()`` ends both."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.master_port = free_port()
        self.master_ui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.master_port}"
        self._processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.master_port), "--webui-port", str(self.master_ui_port),
        )  # fmt: skip
        wait_until_blocking(
            self._master_answers, message="the Spark master's web UI", timeout=START_TIMEOUT_S
        )
        self._spawn(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port()),
            "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
            "--work-dir", str(self.workdir / "work"),
            self.master_url,
        )  # fmt: skip
        wait_until_blocking(
            lambda: self._running() and self.state()["aliveworkers"] >= 1,
            message="a worker registered with the Spark master",
            timeout=START_TIMEOUT_S,
            interval=0.2,
        )

    def state(self) -> dict[str, Any]:
        """The master's own JSON view: workers, cores, active and completed applications."""
        url = f"http://127.0.0.1:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=10) as answer:
            state: dict[str, Any] = json.load(answer)
            return state

    def check_executors_given(self) -> None:
        """AssertionError if an application has waited for an executor longer than
        EXECUTOR_WAIT_S: the worker cannot start one (its memory or cores, or a crash in its log)."""
        now_ms = time.time() * 1000
        for app in self.state()["activeapps"]:
            if app["state"] == "WAITING" and now_ms - app["starttime"] > EXECUTOR_WAIT_S * 1000:
                raise AssertionError(
                    f"application {app['name']} ({app['id']}) has had no executor for "
                    f"{EXECUTOR_WAIT_S:g} s; see {self.workdir}/worker.log and {self.workdir}/work"
                )

    def application_names(self) -> list[str]:
        """The names of the applications the master has run or runs."""
        state = self.state()
        return [app["name"] for app in state["activeapps"] + state["completedapps"]]

    def stop(self) -> None:
        for process in reversed(self._processes):  # the worker first: it stops its executors
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        self._processes.clear()

    def _spawn(self, name: str, main_class: str, *args: str) -> None:
        env = {
            **subprocess_env(),
            **spark_env(),
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOG_DIR": str(self.workdir / "logs"),
            "SPARK_LOCAL_DIRS": str(self.workdir / "local"),
            "SPARK_CONF_DIR": str(self.workdir / "conf"),  # none of the machine's own settings
        }
        with (self.workdir / f"{name}.log").open("ab") as log:
            self._processes.append(
                subprocess.Popen(
                    [str(spark_home() / "bin" / "spark-class"), main_class, *args],
                    env=env,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,  # its own process group: its executors end with it
                )
            )

    def _running(self) -> bool:
        for process in self._processes:
            if process.poll() is not None:
                raise AssertionError(
                    f"a Spark daemon exited ({process.returncode}); see {self.workdir}/*.log"
                )
        return True

    def _master_answers(self) -> bool:
        self._running()
        try:
            self.state()
        except (urllib.error.URLError, ConnectionError):
            return False
        return True
