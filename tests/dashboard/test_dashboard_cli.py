"""``cometmq dashboard`` and the standalone's dashboard, as real processes."""

from __future__ import annotations

import re
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cometmq.client import blocking
from processes import ServerProcess, broker_address, cometmq, standalone_args, start_standalone
from secured_servers import ADMIN, READER, secured_standalone

_DASHBOARD = re.compile(r", dashboard (http://\S+)$")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server, _ = start_standalone(
        tmp_path_factory.mktemp("standalone") / "data", None, "--allowed-host", "dash.example"
    )
    yield server
    server.terminate()


def page(url: str, form: bytes | None = None) -> str:
    """The page at *url*, after posting *form* (URL-encoded) to it if given."""
    with urllib.request.urlopen(url, form, timeout=30) as response:
        assert response.status == 200
        return str(response.read().decode())


def get_status(url: str, host: str) -> int:
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cometmq: error: "), result.stderr
    return lines[0]


def test_the_standalone_serves_a_dashboard_named_at_the_end_of_its_ready_line(
    standalone: ServerProcess,
) -> None:
    found = _DASHBOARD.search(standalone.ready_line)
    assert found is not None, standalone.ready_line
    html = page(found.group(1) + "/")
    assert broker_address(standalone) in html and "broker-a" in html
    port = urllib.parse.urlsplit(found.group(1)).port
    assert get_status(found.group(1) + "/topics", f"dash.example:{port}") == 200
    assert get_status(found.group(1) + "/topics", f"rebound.example:{port}") == 400


def test_no_dashboard_leaves_it_out(tmp_path: Path) -> None:
    server, _ = start_standalone(tmp_path / "data", None, "--no-dashboard", "--no-metrics")
    try:
        assert _DASHBOARD.search(server.ready_line) is None
        assert server.ready_line.endswith(f"data in {tmp_path / 'data'}")
    finally:
        assert server.terminate() == 0


def test_the_dashboard_command_serves_until_sigterm(standalone: ServerProcess, tmp_path: Path) -> None:
    namesrv = re.search(r"namesrv (\S+),", standalone.ready_line)
    assert namesrv is not None
    server = ServerProcess(["dashboard", "-n", namesrv.group(1), "--port", "0"], tmp_path / "dashboard.log")
    try:
        line = server.wait_ready("CometMQ dashboard ready: ")
        url = line.removeprefix("CometMQ dashboard ready: ")
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url), line
        assert "<h1>Topics</h1>" in page(url + "/topics")
    finally:
        assert server.terminate() == 0


def test_a_port_in_use_is_one_line_naming_the_flag(standalone: ServerProcess, tmp_path: Path) -> None:
    namesrv = re.search(r"namesrv (\S+),", standalone.ready_line)
    assert namesrv is not None
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        line = one_line_error(cometmq("dashboard", "-n", namesrv.group(1), "--port", port, timeout=30))
        assert f"127.0.0.1:{port} is already in use" in line and "--port" in line
        result = cometmq(
            # The servers have started by then and say so at INFO.
            *standalone_args(tmp_path / "data", "--dashboard-port", port, "--log-level", "WARNING"),
            timeout=60,
        )
        line = one_line_error(result)
        assert f"127.0.0.1:{port} is already in use" in line and "--dashboard-port" in line


def test_the_dashboard_acts_as_its_user_under_the_clusters_acl(tmp_path: Path) -> None:
    with secured_standalone(tmp_path) as cluster:
        for user, allowed in ((READER, False), (ADMIN, True)):
            args = ["dashboard", "-n", cluster.namesrv, "--port", "0"]
            args += ["--access-key", user.access_key, "--secret-key", user.secret_key]
            server = ServerProcess(args, tmp_path / f"dashboard-{user.access_key}.log")
            try:
                url = server.wait_ready("CometMQ dashboard ready: ").removeprefix("CometMQ dashboard ready: ")
                topic = f"By_{user.access_key}"
                form = urllib.parse.urlencode({"topic": topic, "queues": "1", "back": "/topics"}).encode()
                html = page(url + "/topics", form)
                with blocking.AdminClient(cluster.namesrv, credentials=ADMIN) as admin:
                    created = topic in admin.topic_list()
                assert created is allowed
                if not allowed:
                    assert 'class="flash error"' in html and "response code" in html
            finally:
                assert server.terminate() == 0


def test_allowed_host_is_one_more_name_the_dashboard_answers_to(
    standalone: ServerProcess, tmp_path: Path
) -> None:
    namesrv = re.search(r"namesrv (\S+),", standalone.ready_line)
    assert namesrv is not None
    args = ["dashboard", "-n", namesrv.group(1), "--port", "0", "--allowed-host", "dash.example"]
    server = ServerProcess(args, tmp_path / "dashboard.log")
    try:
        url = server.wait_ready("CometMQ dashboard ready: ").removeprefix("CometMQ dashboard ready: ")
        port = urllib.parse.urlsplit(url).port
        assert get_status(url + "/topics", f"dash.example:{port}") == 200
        assert get_status(url + "/topics", f"localhost:{port}") == 200
        assert get_status(url + "/topics", f"rebound.example:{port}") == 400
    finally:
        assert server.terminate() == 0
