"""``cometmq cluster up``: a NameServer and master/slave groups, each server a process of its own, in real
processes on real ports and files; what replication does with them is tested in tests/replication."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from cometmq.auth import sign
from cometmq.broker import BrokerConfig
from cometmq.cli._cluster import broker_conf, plan
from cometmq.cli._main import build_parser
from cometmq.client import AdminClient
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.remoting import RemotingClient
from processes import COMMAND, TEST_BROKER_CONF, cometmq, subprocess_env
from secured_servers import INIT_USER, INNER, ROOT
from waiting import wait_until, wait_until_blocking

READY = "CometMQ cluster ready:"
ROW = re.compile(
    r"^(namesrv|etcd|broker-[a-z]-\d+) +(\S+) .* (\d+\.\d+\.\d+\.\d+:\d+) +(\d+) +(\S+)$", re.MULTILINE
)


class Cluster:
    """``cluster up`` on ports the OS picks; its stdout and stderr go to files read while it runs."""

    def __init__(self, data_dir: Path, conf: Path, *extra: str) -> None:
        self.stdout = data_dir.parent / "cluster-up.out"
        self.stderr = data_dir.parent / "cluster-up.err"
        args = ["cluster", "up", "--data-dir", str(data_dir), "--namesrv-port", "0", "--base-port", "0"]
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [*COMMAND, *args, "-c", str(conf), *extra], stdout=out, stderr=err, env=subprocess_env()
            )
        try:
            found = wait_until_blocking(
                lambda: (
                    self.proc.poll() is not None or re.search(rf"^{READY} namesrv (\S+),", self.out(), re.M)
                ),
                message="the cluster's ready line",
                timeout=90,
            )
        except BaseException:
            self.close()
            raise
        assert isinstance(found, re.Match), self.out() + self.err()
        self.namesrv = found.group(1)

    def out(self) -> str:
        return self.stdout.read_text()

    def err(self) -> str:
        return self.stderr.read_text()

    def close(self) -> None:
        """The test's last resort: SIGTERM (its servers stop with it), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def rows(table: str) -> dict[str, tuple[str, str, int, Path]]:
    """The ready table: server → (role, address, pid, log)."""
    return {m[1]: (m[2], m[3], int(m[4]), Path(m[5])) for m in ROW.finditer(table)}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    path = tmp_path / "small.conf"
    path.write_text(TEST_BROKER_CONF)
    return path


def test_default_ports_leave_each_brokers_ha_port_free() -> None:
    servers = plan(build_parser().parse_args(["cluster", "up"]))
    assert [(s.label, s.role, s.port) for s in servers] == [
        ("namesrv", "namesrv", 9876),
        ("broker-a-0", "ASYNC_MASTER", 10911),
        ("broker-a-1", "SLAVE", 10913),
        ("broker-b-0", "ASYNC_MASTER", 10921),
        ("broker-b-1", "SLAVE", 10923),
    ]
    many = plan(build_parser().parse_args(["cluster", "up", "--groups", "3", "--slaves", "5"]))
    taken = [port for s in many[1:] for port in (s.port, s.port + 1)]  # listenPort and haListenPort
    assert len(taken) == len(set(taken)) and 9876 not in taken


def test_cluster_up_runs_two_master_slave_groups_that_register_and_stop_cleanly_on_ctrl_c(
    tmp_path: Path, conf: Path
) -> None:
    data = tmp_path / "cluster"
    cluster = Cluster(data, conf, "--role", "SYNC_MASTER")
    brokers = [f"broker-{g}-{i}" for g in "ab" for i in (0, 1)]
    try:
        started = rows(cluster.out())
        assert set(started) == {"namesrv", *brokers}
        assert len({pid for _, _, pid, _ in started.values()}) == 5  # a process each
        assert all(alive(pid) for _, _, pid, _ in started.values())
        for label in brokers:
            config = BrokerConfig.from_file(data / label / "broker.conf")
            master = label.endswith("-0")
            assert config.broker_name == label[:-2] and config.broker_id == (0 if master else 1)
            assert config.broker_role.name == started[label][0] == ("SYNC_MASTER" if master else "SLAVE")
            assert config.broker_cluster_name == "DefaultCluster"
            assert config.namesrv_addr == cluster.namesrv == started["namesrv"][1]
            assert Path(config.store_path_root_dir) == data / label
            assert config.mapped_file_size_commit_log == 4194304  # the -c file's key kept
            assert (data / label / "abort").exists()  # each store is running
            assert (data / label / "lock").read_text().split()[0] == str(started[label][2])

        async def registered() -> dict[str, dict[int, str]]:
            async with AdminClient(cluster.namesrv) as admin:
                info = await admin.cluster_info()
            groups = {b.broker_name: dict(b.broker_addrs) for b in info.brokers_of("DefaultCluster")}
            return groups if all(len(groups.get(n, {})) == 2 for n in ("broker-a", "broker-b")) else {}

        groups = asyncio.run(wait_until(registered, message="both groups registered with ids 0 and 1"))
        assert {f"broker-{g}-{i}": groups[f"broker-{g}"][i] for g in "ab" for i in (0, 1)} == {
            label: started[label][1] for label in brokers
        }
        for label in brokers:  # every broker serves on the address it registered
            host, port = started[label][1].rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=10).close()

        cluster.proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the command alone
        assert cluster.proc.wait(timeout=90) == 0, cluster.out() + cluster.err()
    finally:
        cluster.close()
    out = cluster.out()
    for label, (_, _, pid, log) in started.items():
        assert f"{label}: exit status 0" in out
        assert not alive(pid)
        assert log.parent == data / label and log.stat().st_size > 0
        assert "event loop), pid " in log.read_text()  # its start-up summary
        assert "ready: " in log.with_suffix(".out").read_text()  # what it printed
    for label in brokers:
        assert not (data / label / "abort").exists(), label  # each store shut down cleanly
    assert "SLAVE_NOT_AVAILABLE" not in cluster.err()  # a SYNC_MASTER with a slave is no mistake
    assert (
        f"starting a NameServer, 2 master(s), then 2 slave(s), each logging to its directory under {data}"
        in (cluster.err())
    )


def test_cluster_up_stops_with_the_log_of_a_broker_that_cannot_start(tmp_path: Path) -> None:
    bad = tmp_path / "bad.conf"
    bad.write_text("flushDiskType=sync\n")
    data = tmp_path / "cluster"
    for master in ("broker-a-0", "broker-b-0"):  # what an earlier run printed
        (data / master).mkdir(parents=True)
        (data / master / "broker.out").write_text("an earlier run's output\n")
    done = cometmq(
        "cluster", "up", "--data-dir", str(data), "--namesrv-port", "0", "--base-port", "0", "-c", str(bad)
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "flushDiskType='sync' is not one of ASYNC_FLUSH, SYNC_FLUSH" in done.stderr  # its log's end
    failed = re.search(r"^cometmq: error: (broker-[ab]-0) did not start: exit status 1$", done.stderr, re.M)
    assert failed is not None
    # Its .out file holds this start's output only.
    out = (data / failed.group(1) / "broker.out").read_text()
    assert "is not one of ASYNC_FLUSH" in out and "an earlier run" not in out
    assert "namesrv: exit status 0" in done.stdout  # what had started is stopped cleanly
    assert READY not in done.stdout
    assert not list(data.glob("broker-*-1"))  # no slave started without its master


def test_cluster_up_reports_a_server_that_dies_and_kills_one_that_does_not_stop(
    tmp_path: Path, conf: Path
) -> None:
    data = tmp_path / "cluster"
    cluster = Cluster(data, conf, "--groups", "1", "--stop-timeout", "1")
    try:
        started = rows(cluster.out())
        slave, master = started["broker-a-1"][2], started["broker-a-0"][2]
        os.kill(slave, signal.SIGKILL)
        wait_until_blocking(
            lambda: (
                f"broker-a-1 (SLAVE, pid {slave}) ended, killed by signal 9 (SIGKILL); not restarted"
                in cluster.err()
            ),
            message="the slave's death reported",
        )
        os.kill(master, signal.SIGSTOP)  # it can no longer act on SIGTERM
        cluster.proc.send_signal(signal.SIGTERM)
        assert cluster.proc.wait(timeout=90) == 1
    finally:
        cluster.close()
    assert f"broker-a-0 (pid {master}) did not stop within 1 s: killed" in cluster.err()
    out = cluster.out()
    assert (
        "broker-a-0: killed by signal 9 (SIGKILL)" in out
        and "broker-a-1: killed by signal 9 (SIGKILL)" in out
    )
    assert "namesrv: exit status 0" in out
    assert (
        "not every server stopped cleanly: broker-a-0 killed by signal 9 (SIGKILL), "
        f"see {data / 'broker-a-0' / 'broker.out'}" in cluster.err()
    )
    assert not alive(master)


def listening_socket_above_a_free_port() -> socket.socket:
    """A socket listening on a port P such that P - 1 was free when looked at: P is the HA port of a
    master given --base-port P - 1."""
    while True:
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        below = socket.socket()
        try:
            below.bind(("127.0.0.1", taken.getsockname()[1] - 1))
        except OSError:
            taken.close()
            continue
        finally:
            below.close()
        taken.listen()
        return taken


def test_cluster_up_names_a_port_in_use_and_the_options_that_choose_others_before_starting_anything(
    tmp_path: Path,
) -> None:
    data = tmp_path / "cluster"
    options = ["--data-dir", str(data), "--groups", "1", "--slaves", "0"]
    with socket.socket() as namesrv:
        namesrv.bind(("127.0.0.1", 0))
        namesrv.listen()
        port = namesrv.getsockname()[1]
        done = cometmq("cluster", "up", *options, "--namesrv-port", str(port), "--base-port", "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == (
        f"cometmq: error: 127.0.0.1:{port} (namesrv's port) is already in use (is another CometMQ "
        "running?): stop it, or choose other ports with --namesrv-port and --base-port\n"
    )
    with listening_socket_above_a_free_port() as ha:
        port = ha.getsockname()[1]
        done = cometmq("cluster", "up", *options, "--namesrv-port", "0", "--base-port", str(port - 1))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"127.0.0.1:{port} (broker-a-0's HA port) is already in use" in done.stderr
    assert done.stdout == "" and not data.exists()  # nothing started


def test_cluster_up_warns_that_a_sync_master_without_slaves_answers_every_send_slave_not_available(
    tmp_path: Path, conf: Path
) -> None:
    cluster = Cluster(tmp_path / "cluster", conf, "--groups", "1", "--slaves", "0", "--role", "SYNC_MASTER")
    try:
        assert "broker-a-0" in rows(cluster.out())
        cluster.proc.send_signal(signal.SIGINT)
        assert cluster.proc.wait(timeout=90) == 0, cluster.out() + cluster.err()
    finally:
        cluster.close()
    assert (
        "WARNING cometmq.cli: --role SYNC_MASTER with --slaves 0: no slave can confirm a send, so every "
        "send is answered SLAVE_NOT_AVAILABLE (stored on the master alone)"
    ) in cluster.err()


def test_etcd_mode_plans_an_etcd_and_equal_brokers_numbered_from_1() -> None:
    args = build_parser().parse_args(["cluster", "up", "--etcd", "--groups", "1", "--slaves", "2"])
    servers = plan(args)
    assert [(s.label, s.role, s.port, s.broker_id) for s in servers] == [
        ("namesrv", "namesrv", 9876, 0),
        ("etcd", "etcd", 2379, 0),
        ("broker-a-1", "ASYNC_MASTER", 10911, 1),
        ("broker-a-2", "ASYNC_MASTER", 10913, 2),
        ("broker-a-3", "ASYNC_MASTER", 10915, 3),
    ]
    conf = broker_conf(servers[3], args, "127.0.0.1:9876", "127.0.0.1:2379").splitlines()
    assert "etcdEndpoints=127.0.0.1:2379" in conf and "brokerId=2" in conf
    static = broker_conf(servers[3], args, "127.0.0.1:9876").splitlines()
    assert not any(line.startswith("etcd") for line in static)


def test_cluster_up_etcd_elects_one_master_per_group_and_stops_etcd_last(tmp_path: Path, conf: Path) -> None:
    data = tmp_path / "cluster"
    cluster = Cluster(data, conf, "--etcd", "--etcd-port", "0", "--groups", "1", "--slaves", "2")
    try:
        started = rows(cluster.out())
        assert set(started) == {"namesrv", "etcd", "broker-a-1", "broker-a-2", "broker-a-3"}
        assert (data / "etcd" / "data").is_dir()
        for label in ("broker-a-1", "broker-a-2", "broker-a-3"):
            config = BrokerConfig.from_file(data / label / "broker.conf")
            assert config.etcd_endpoints == started["etcd"][1]

        async def elected() -> dict[int, str]:
            async with AdminClient(cluster.namesrv) as admin:
                info = await admin.cluster_info()
            addrs = {i: a for b in info.brokers_of("DefaultCluster") for i, a in b.broker_addrs.items()}
            return addrs if len(addrs) == 3 and 0 in addrs else {}

        registered = asyncio.run(wait_until(elected, message="a master (id 0) and two slaves registered"))
        brokers = {started[label][1] for label in ("broker-a-1", "broker-a-2", "broker-a-3")}
        assert set(registered.values()) == brokers

        cluster.proc.send_signal(signal.SIGINT)
        assert cluster.proc.wait(timeout=90) == 0, cluster.out() + cluster.err()
    finally:
        cluster.close()
    out = cluster.out()
    for label in started:
        assert f"{label}: exit status 0" in out  # etcd's SIGTERM ending counts as its clean stop
        assert not alive(started[label][2])


def test_cluster_up_locks_its_name_server_with_the_access_control_keys_of_its_file(tmp_path: Path) -> None:
    acl_conf = tmp_path / "acl.conf"
    acl_conf.write_text(
        TEST_BROKER_CONF
        + "aclEnable=true\n"
        + f"initAuthenticationUser={INIT_USER}\n"
        + f"innerClientAuthenticationCredentials={INNER}\n"
    )
    cluster = Cluster(tmp_path / "cluster", acl_conf, "--groups", "1", "--slaves", "0")
    try:
        # The master registered with its name server, which the cluster's ready line waits for: it
        # signed its registration with the credentials of the file.
        namesrv_conf = (tmp_path / "cluster" / "namesrv" / "namesrv.conf").read_text()
        assert "aclEnable=true" in namesrv_conf and "mappedFileSize" not in namesrv_conf

        async def unsigned_and_signed() -> tuple[RemotingCommand, RemotingCommand]:
            client = RemotingClient()
            try:
                unsigned = await client.invoke(
                    cluster.namesrv, RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO), 10.0
                )
                request = RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)
                sign(request, ROOT)
                return unsigned, await client.invoke(cluster.namesrv, request, 10.0)
            finally:
                await client.close()

        unsigned, signed = asyncio.run(unsigned_and_signed())
        assert unsigned.code == ResponseCode.NO_PERMISSION, unsigned.remark
        assert signed.code == ResponseCode.SUCCESS and b"broker-a" in signed.body
    finally:
        cluster.close()
