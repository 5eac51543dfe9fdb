"""How a C++ client scenario reports: a line before the client's shutdown(), the final one after it.

librocketmq has aborted inside shutdown() (std::terminate on a boost::thread_interrupted escaping one of
its threads) once in this suite's runs; the scenario's line from before shutdown() keeps such a run's
result. The aborting process in the tests below is a stand-in written here (the real abort cannot be
provoked): a Python child that prints what the scenario prints, then aborts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from test_cpp_client import SCRIPT

from processes import LIBROCKETMQ_SHUTDOWN_ABORT, read_cpp_result

if TYPE_CHECKING:
    from processes import StandaloneServer

pytestmark = pytest.mark.interop

PENDING = {"scenario": "push-consume", "errors": [], "ok": True, "count": 3, "shutdown": "pending"}
TERMINATE = f"terminate called after throwing an instance of '{LIBROCKETMQ_SHUTDOWN_ABORT}'"


def _die_in_shutdown(stderr_text: str, how: str) -> subprocess.CompletedProcess[str]:
    """A stand-in for a scenario process: prints the pending line, then ends the way *how* says."""
    program = (
        "import os, sys\n"
        f"print({json.dumps(json.dumps(PENDING))}, flush=True)\n"
        f"print({stderr_text!r}, file=sys.stderr, flush=True)\n"
        f"{how}\n"
    )
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30)


def test_a_run_aborted_by_librocketmq_in_shutdown_keeps_what_it_reported_before() -> None:
    proc = _die_in_shutdown(TERMINATE, "os.abort()")
    assert proc.returncode < 0
    result = read_cpp_result(proc.stdout, proc.returncode, proc.stderr)
    assert result["ok"] and result["count"] == 3
    assert "died in shutdown()" in result["shutdown"] and LIBROCKETMQ_SHUTDOWN_ABORT in result["shutdown"]


@pytest.mark.parametrize(
    ("stderr_text", "how"),
    [("Segmentation fault", "os.kill(os.getpid(), 11)"), (TERMINATE, "sys.exit(3)"), ("", "os.abort()")],
    ids=["another-signal", "an-exit-status", "an-abort-without-the-known-message"],
)
def test_any_other_death_in_shutdown_fails_the_run(stderr_text: str, how: str) -> None:
    proc = _die_in_shutdown(stderr_text, how)
    result = read_cpp_result(proc.stdout, proc.returncode, proc.stderr)
    assert not result["ok"]
    assert any("died in shutdown()" in error for error in result["errors"])


def test_a_scenario_reports_before_shutdown_then_finally(standalone: StandaloneServer) -> None:
    args = ["produce", "--namesrv", standalone.namesrv, "--topic", "ReportTopic", "--count", "2"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--mode", "sync"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    before, final = (json.loads(line) for line in proc.stdout.strip().splitlines())
    assert before["shutdown"] == "pending" and final["shutdown"] == "ok"
    assert [s["status"] for s in before["sent"]] == ["OK", "OK"]
    assert before["sent"] == final["sent"]
    assert read_cpp_result(proc.stdout, proc.returncode, proc.stderr) == final
