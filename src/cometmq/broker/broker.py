"""The Broker: stores and serves messages, and keeps the NameServer informed of its topics."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from cometmq.atomic_file import write_atomic
from cometmq.auth import AccessControl, Action, Need, Resource, ResourceType
from cometmq.auth.serving import ServerAccess, warn_if_open
from cometmq.broker._admin import AdminProcessor, runtime_info
from cometmq.broker._clients import ConsumerManager, ProducerManager
from cometmq.broker._consumers import ConsumerManageProcessor
from cometmq.broker._dedup import Deduplicator
from cometmq.broker._failover import BrokerReplica
from cometmq.broker._filter import CheckClientConfigProcessor
from cometmq.broker._groups import SubscriptionGroupManager
from cometmq.broker._load import log_load_summaries
from cometmq.broker._locks import QueueLockProcessor
from cometmq.broker._longpoll import PullHoldService
from cometmq.broker._offsets import ConsumerOffsetManager
from cometmq.broker._pop import PopService
from cometmq.broker._pull import PullProcessor
from cometmq.broker._schedule import ScheduleMessageService
from cometmq.broker._send import MASTERSHIP_NOT_TRUSTED, SendProcessor, host_bytes
from cometmq.broker._sendback import SendBackProcessor
from cometmq.broker._slave_sync import (
    SLAVE_SYNC_FIRST_S,
    SLAVE_SYNC_PERIOD_S,
    ProcessorTable,
    SlaveSynchronize,
    master_named,
    slave_refusals,
)
from cometmq.broker._stats import BrokerStats, sample_every_second
from cometmq.broker._timer import TimerMessageService
from cometmq.broker._topics import TopicConfigManager
from cometmq.broker._transaction import EndTransactionProcessor, TransactionService
from cometmq.broker.config import RUNTIME_KEYS, RUNTIME_SETTINGS_FILE, BrokerConfig, BrokerRole
from cometmq.errors import CometMQError, ConfigError, RequestRefused
from cometmq.failover import Failover
from cometmq.javaprops import format_properties, read_properties
from cometmq.metrics import MetricsExporterType
from cometmq.protocol import RemotingCommand, RequestCode, ResponseCode
from cometmq.protocol.broker_headers import NotifyBrokerRoleChangedRequestHeader
from cometmq.protocol.ha_status import HARuntimeInfo
from cometmq.protocol.namesrv_headers import BrokerRequestHeader, RegisterBrokerRequestHeader
from cometmq.protocol.route import DataVersion
from cometmq.remoting import Connection, Dispatcher, RemotingClient, RemotingServer
from cometmq.replication import HAClient, HAServer
from cometmq.store import FlushDiskType, MessageStore

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from cometmq.metrics import BrokerMetrics, MetricsEndpoint

log = logging.getLogger("cometmq.broker")

CLIENT_SCAN_INTERVAL_S = 10.0


class Broker:
    """One broker process, a master or a slave: a RemotingServer, the request processors, and the
    store. ``brokerRole`` gives the role at start; ``become_master`` and ``become_slave`` switch it
    while the broker runs (a manual switch, or the failover election)."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        disk_usage_probe: Callable[[Path], float] | None = None,
        slave_sync_period_s: float = SLAVE_SYNC_PERIOD_S,
        access: ServerAccess | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        """*disk_usage_probe* replaces measuring the store's filesystem (``StoreConfig``); tests
        simulate a full disk with it. *slave_sync_period_s* is how often a slave copies its master's
        metadata (RocketMQ's 10 s; tests make it shorter). *access* is the access control to use
        (``cometmq standalone`` shares one with its name server); by default one made from the
        config. With metricsExporterType=PROM the broker serves its metrics on their own endpoint, from
        *metrics_registry* if given (``cometmq standalone`` adds its name server's to it). ConfigError
        for settings a broker cannot run with (``BrokerConfig.settle_role``, ``check_access``)."""
        # The broker's own id in its group, which it registers under while a slave (a master
        # registers as 0, and settle_role sets a static master's brokerId to 0).
        self.own_id = config.broker_id
        config.settle_role()
        config.check_access()
        # Settings changed while an earlier run of this broker ran (UPDATE_BROKER_CONFIG) win over the
        # file and flags, as RocketMQ's rewritten broker.conf would.
        self.runtime_settings_path = (
            Path(config.store_path_root_dir).expanduser() / "config" / RUNTIME_SETTINGS_FILE
        )
        # Every setting changed at run time, this run's and the earlier runs', as the file keeps them.
        # Each change writes a numbered snapshot of it; the writes run on other threads, in any order:
        # one at a time, and never an older snapshot over a newer one.
        self.runtime_settings = self._load_runtime_settings(config)
        self._runtime_settings_taken = 0
        self._runtime_settings_written = 0
        self._runtime_settings_lock = threading.Lock()
        self.config = config
        self.config_version = DataVersion()
        self.access = (
            access if access is not None else ServerAccess(config.acl_settings(), config.broker_cluster_name)
        )
        self._slave = config.failover or config.broker_role is BrokerRole.SLAVE
        # How this broker acknowledges sends while it is master (a SLAVE promoted by hand: as ASYNC).
        self.master_role = (
            BrokerRole.ASYNC_MASTER if config.broker_role is BrokerRole.SLAVE else config.broker_role
        )
        self.epoch = 0  # the epoch of the master this broker is, or follows (0: not known)
        # A master made by a switch registers its epoch: the NameServer then gives it id 0 even while
        # the master it replaces is still registered (paused, or cut off). A static master does not.
        self._switched_epoch = 0
        # Failover mode: the group's in-sync set as committed in etcd (broker ids, the master's own
        # included). A SYNC_MASTER waits for these and refuses sends while they are too few.
        self.in_sync: frozenset[int] = frozenset()
        # Failover mode, as a slave: the confirmed offset reads stop at (``read_limit``).
        self.confirmed = 0
        self._role_lock = asyncio.Lock()  # one switch at a time
        # The HA port: as configured until a master's HA server first binds it, then the one bound
        # (with listenPort 0, the one the OS picked), kept across switches of role.
        self._ha_listen_port = 0
        self._ha_bound = False
        store_config = config.store_config(disk_usage_probe)
        self.root_dir = store_config.root_dir
        config_dir = self.root_dir / "config"
        self.store = MessageStore(store_config)
        self.sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        # Replication: a master's HA server (a SYNC_MASTER's sends wait on it), a slave's HA client.
        self.ha_server: HAServer | None = None
        self.ha_client: HAClient | None = None
        self.sync_master = False  # a running SYNC_MASTER: sends wait for a slave
        self.store_host = host_bytes(config.broker_addr)
        # Failover mode: the election on etcd that decides this broker's role (made at start).
        self.election: Failover | None = None
        # Every topic change is registered with the NameServer soon, not only on the 30 s period.
        self.topics = TopicConfigManager(config, config_dir, on_change=self._topic_changed)
        self.offsets = ConsumerOffsetManager(config_dir)
        self.groups = SubscriptionGroupManager(config_dir, config.auto_create_subscription_group)
        self.consumers = ConsumerManager()
        self.producers = ProducerManager()
        self.pull_holds = PullHoldService()
        # POP consumption: messages in flight, their revive, held pops (pop/inflight.journal).
        self.pop = PopService(self)
        # Delayed messages: parking in SCHEDULE_TOPIC_XXXX, delivery when due, delayOffset.json.
        self.schedule = ScheduleMessageService(self, config.message_delay_level, config_dir)
        # Timer messages: parking in rmq_sys_wheel_timer, delivery when due, timerProgress.json.
        self.timer = TimerMessageService(self, config_dir)
        # Half messages: their settled state, the check-back, transactionChecks.json.
        self.transactions = TransactionService(self, config_dir)
        # Producing exactly once: the UNIQ_KEYs of the deduplication window (a master's).
        self.deduplicator = Deduplicator(self)
        self.stats = BrokerStats()
        self._metrics_registry = metrics_registry
        self.metrics: BrokerMetrics | None = None
        self.metrics_endpoint: MetricsEndpoint | None = None
        self.boot_timestamp = int(time.time() * 1000)
        self._server: RemotingServer | None = None
        self._dispatch: Dispatcher | None = None
        self._slave_sync_task: asyncio.Task[None] | None = None
        # The context of the broker's own connections (tls.enable): registrations, a slave's HA link.
        self._client_tls = config.tls.client_context()
        config.tls.server_context()  # a certificate that cannot be loaded: ConfigError before any start
        # Signs what the broker sends (registrations, a slave's requests to its master) when it has
        # credentials of its own.
        self._namesrv_client = RemotingClient(
            credentials=config.inner_client_credentials, ssl_context=self._client_tls
        )
        self._register_wanted = asyncio.Event()
        # Topics created, updated or deleted since the last registration, registered alone (RocketMQ's
        # registerIncrementBrokerData) unless the whole table is due: at start, on the period, after a
        # role or setting change, or after a registration a NameServer did not take.
        self._topics_to_register: set[str] = set()
        self._whole_table_wanted = False
        # Per NameServer, the connection the whole table last went over. A NameServer forgets a
        # broker whose connection closed (and all of it when it restarts), and merges a registration
        # only when its DataVersion is new: over any other connection, the whole table goes again.
        self._table_registered_over: dict[str, Connection] = {}
        # Ids this broker registered under before a role switch, to unregister on the next registration.
        self._stale_ids: set[int] = set()
        self._tasks: list[asyncio.Task[None]] = []
        # A slave's master, as the NameServer last named it in answer to a registration: its remoting
        # address (None while it names none) and its HA address (kept when it names none, as RocketMQ
        # keeps trying the last one).
        self.master_addr: str | None = None
        self.master_ha_addr: str | None = None
        # Its requests go over the client the broker registers with (RocketMQ's BrokerOuterAPI).
        self.slave_sync = SlaveSynchronize(
            self, self._namesrv_client, min(SLAVE_SYNC_FIRST_S, slave_sync_period_s), slave_sync_period_s
        )

    def _load_runtime_settings(self, config: BrokerConfig) -> dict[str, str]:
        path = self.runtime_settings_path
        try:
            values = read_properties(path)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        # The file is the broker's own, but may hold a key from a version that let it change at run
        # time, or be edited by hand: say which file to fix.
        fixed = sorted(values.keys() - RUNTIME_KEYS)
        if fixed:
            raise ConfigError(
                f"{path} keeps {', '.join(fixed)}, which cannot change at run time: delete "
                f"{'that line' if len(fixed) == 1 else 'those lines'} from the file and set the value in "
                "the broker's configuration"
            )
        try:
            config.change_at_run_time(values, str(path))
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}; correct or delete that line of the file") from None
        if values:
            log.info("settings changed at run time, kept in %s: %s", path, format_properties(values).strip())
        return values

    def change_settings(self, values: dict[str, str]) -> Callable[[], None]:
        """Apply settings changed while the broker runs (UPDATE_BROKER_CONFIG; ConfigError as
        ``BrokerConfig.change_at_run_time``), and return the (blocking) write that keeps them for the
        next start, with the ones changed before."""
        config = self.config
        config.change_at_run_time(values, "UPDATE_BROKER_CONFIG")
        self.groups.auto_create = config.auto_create_subscription_group
        self.config_version.next_version()
        log.info("settings changed at run time: %s", format_properties(values).strip())
        if values.keys() & {"autoCreateTopicEnable", "defaultTopicQueueNums"}:
            self.topics.default_topic_changed()  # registers the table
        elif "brokerPermission" in values:
            self.topics.data_version.next_version()
            self.request_register()
        self.runtime_settings.update(values)
        self._runtime_settings_taken += 1
        return functools.partial(
            self._write_runtime_settings,
            self._runtime_settings_taken,
            format_properties(self.runtime_settings),
        )

    def _write_runtime_settings(self, snapshot: int, text: str) -> None:
        path = self.runtime_settings_path
        with self._runtime_settings_lock:
            if snapshot < self._runtime_settings_written:
                return  # a later change is on disk already, with this one's keys
            try:
                write_atomic(path, text.encode())
            except OSError as exc:
                raise RequestRefused(
                    ResponseCode.SYSTEM_ERROR,
                    f"the settings are changed but cannot be kept for the next start in {path}: "
                    f"{exc.strerror or exc}",
                ) from None
            self._runtime_settings_written = snapshot

    @property
    def is_slave(self) -> bool:
        return self._slave

    @property
    def registered_id(self) -> int:
        """The id this broker registers under: the master's 0, or its own brokerId as a slave."""
        return self.own_id if self._slave else 0

    @property
    def role(self) -> BrokerRole:
        """The role now: SLAVE, or how this master acknowledges."""
        return BrokerRole.SLAVE if self._slave else self.master_role

    @property
    def port(self) -> int:
        return self._server.port if self._server is not None else self.config.listen_port

    @property
    def connection_count(self) -> int:
        """Client connections open now (other brokers' and tools' included)."""
        return len(self._server.connections) if self._server is not None else 0

    @property
    def ha_port(self) -> int:
        """The HA port advertised to the NameServer: the master's HA server's (the same across switches
        of role once bound)."""
        return self._ha_listen_port if self._ha_bound else self.config.ha_port

    @property
    def access_control(self) -> AccessControl | None:
        """What checks every request before its handler (None while aclEnable is off)."""
        return self.access.access_control

    def runtime_info(self) -> dict[str, str]:
        return runtime_info(self)

    def ha_status(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_HA_STATUS: the replication state (a master's links, or a slave's link), with the
        epoch and, in failover mode, the in-sync set."""
        replication = self.ha_client if self._slave else self.ha_server
        if replication is not None:
            info = replication.runtime_info()
        else:
            info = HARuntimeInfo(
                master=not self._slave, master_commit_log_max_offset=self.store.replica_end()
            )
        epochs = self.store.epochs()
        info.epoch = epochs[-1].epoch if epochs else 0
        info.failover = self.config.failover
        info.in_sync_replicas = sorted(self.in_sync) if self.config.failover else []
        return request.response(body=info.encode())

    def _dispatcher(self) -> Dispatcher:
        return Dispatcher(self._processor_table(), gate=self.access.gate())

    def _processor_table(self) -> ProcessorTable:
        """The broker's one processor table for its role now: each request code and the processor
        method serving it."""
        send = SendProcessor(self)
        pull = PullProcessor(self)
        consumers = ConsumerManageProcessor(self)
        send_back = SendBackProcessor(self)
        locks = QueueLockProcessor()
        client_config = CheckClientConfigProcessor(self)
        admin = AdminProcessor(self)
        end_transaction = EndTransactionProcessor(self)
        return self._for_role(
            {
                RequestCode.SEND_MESSAGE: send.send_message,
                RequestCode.SEND_MESSAGE_V2: send.send_message_v2,
                RequestCode.SEND_BATCH_MESSAGE: send.send_message_v2,
                RequestCode.PULL_MESSAGE: pull.pull_message,
                RequestCode.POP_MESSAGE: self.pop.pop_message,
                RequestCode.ACK_MESSAGE: self.pop.ack_message,
                RequestCode.BATCH_ACK_MESSAGE: self.pop.batch_ack_message,
                RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.pop.change_message_invisible_time,
                RequestCode.PEEK_MESSAGE: self.pop.peek_message,
                RequestCode.NOTIFICATION: self.pop.notification,
                RequestCode.POLLING_INFO: self.pop.polling_info,
                RequestCode.CONSUMER_SEND_MSG_BACK: send_back.consumer_send_msg_back,
                RequestCode.END_TRANSACTION: end_transaction.end_transaction,
                RequestCode.HEART_BEAT: consumers.heart_beat,
                RequestCode.UNREGISTER_CLIENT: consumers.unregister_client,
                RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumers.get_consumer_list_by_group,
                RequestCode.QUERY_CONSUMER_OFFSET: consumers.query_consumer_offset,
                RequestCode.UPDATE_CONSUMER_OFFSET: consumers.update_consumer_offset,
                RequestCode.LOCK_BATCH_MQ: locks.lock_batch_mq,
                RequestCode.UNLOCK_BATCH_MQ: locks.unlock_batch_mq,
                RequestCode.CHECK_CLIENT_CONFIG: client_config.check_client_config,
                RequestCode.UPDATE_AND_CREATE_TOPIC: admin.update_and_create_topic,
                RequestCode.DELETE_TOPIC_IN_BROKER: admin.delete_topic_in_broker,
                RequestCode.GET_ALL_TOPIC_CONFIG: admin.get_all_topic_config,
                RequestCode.GET_TOPIC_CONFIG: admin.get_topic_config,
                RequestCode.GET_ALL_CONSUMER_OFFSET: admin.get_all_consumer_offset,
                RequestCode.GET_TOPIC_STATS_INFO: admin.get_topic_stats_info,
                RequestCode.GET_MAX_OFFSET: admin.get_max_offset,
                RequestCode.GET_MIN_OFFSET: admin.get_min_offset,
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: admin.search_offset_by_timestamp,
                RequestCode.GET_EARLIEST_MSG_STORETIME: admin.get_earliest_msg_storetime,
                RequestCode.VIEW_MESSAGE_BY_ID: admin.view_message_by_id,
                RequestCode.QUERY_MESSAGE: admin.query_message,
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: admin.update_and_create_subscription_group,
                RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.get_all_subscription_group_config,
                RequestCode.DELETE_SUBSCRIPTIONGROUP: admin.delete_subscription_group,
                RequestCode.GET_CONSUME_STATS: admin.get_consume_stats,
                RequestCode.GET_CONSUMER_CONNECTION_LIST: admin.get_consumer_connection_list,
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: admin.invoke_broker_to_reset_offset,
                RequestCode.GET_ALL_DELAY_OFFSET: admin.get_all_delay_offset,
                RequestCode.GET_BROKER_RUNTIME_INFO: admin.get_broker_runtime_info,
                RequestCode.GET_BROKER_CONFIG: admin.get_broker_config,
                RequestCode.UPDATE_BROKER_CONFIG: admin.update_broker_config,
                RequestCode.VIEW_BROKER_STATS_DATA: admin.view_broker_stats_data,
                RequestCode.GET_BROKER_CONSUME_STATS: admin.get_broker_consume_stats,
                RequestCode.GET_PRODUCER_CONNECTION_LIST: admin.get_producer_connection_list,
                RequestCode.CLONE_GROUP_OFFSET: admin.clone_group_offset,
                RequestCode.GET_BROKER_HA_STATUS: self.ha_status,
                RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self.role_changed,
                **self.access.admin_handlers(),
            }
        )

    def _for_role(self, table: ProcessorTable) -> ProcessorTable:
        """A slave refuses the requests only a master serves."""
        if self.is_slave:
            table.update(slave_refusals(self))
        return table

    async def start(self) -> None:
        self.root_dir.mkdir(parents=True, exist_ok=True)
        self.topics.load()
        self.offsets.load()
        self.groups.load()
        self.schedule.load()
        self.timer.load()
        self.topics.on_batch_topic = self.store.declare_batch_topic
        self.topics.declare_batch_topics()
        await asyncio.get_running_loop().run_in_executor(None, self.store.start)
        self.store.add_arrival_listener(self.pull_holds.on_arrival)
        await asyncio.get_running_loop().run_in_executor(None, self.pop.open)
        if not self._slave:  # before sends are served
            await asyncio.get_running_loop().run_in_executor(None, self.deduplicator.rebuild)
        await self.access.start()
        self._dispatch = self._dispatcher()
        if self.config.metrics_exporter_type is MetricsExporterType.PROM:
            from cometmq.metrics import BrokerMetrics

            self.metrics = BrokerMetrics(self)
        server = RemotingServer(
            self._dispatch,
            self.config.bind_host,
            self.config.listen_port,
            busy_poll_us=self.config.busy_poll_micros,
            busy_poll_adaptive=self.config.busy_poll_adaptive,
            limits=self.config.server_limits(),
            tls=self.config.tls,
            observer=self.metrics.rpc_latency if self.metrics is not None else None,
        )
        server.add_close_listener(self._connection_closed)
        ha_port = self.config.ha_port  # before listen_port takes the port the OS picks
        try:
            # Replication first: a SYNC_MASTER must never answer a send before it can wait for a slave.
            await self._start_replication(ha_port)
            await server.start()
            if self.metrics is not None:
                await self._start_metrics_endpoint(self.metrics)
        except BaseException:
            await server.stop()
            await self._stop_replication()
            await self.access.stop()
            # A broker that cannot listen serves nothing: it gives its data directory (and the lock on
            # it) up, so that a retry in this process, on another port, can have it.
            self.pop.close()
            await asyncio.get_running_loop().run_in_executor(None, self.store.shutdown)
            raise
        self._server = server
        if self.config.listen_port == 0:  # advertise the port the OS picked, not 0
            self.config.listen_port = server.port
            self.store_host = host_bytes(self.config.broker_addr)
        warn_if_open(
            "broker", self.config.bind_host, server.port, self.config.acl_enable, self.config.tls.mode
        )
        # Only now: delivered copies carry the final store host (their offset message ids name it).
        self.schedule.start()
        self.timer.start()
        self.pop.start()
        self.transactions.start()
        log.info(
            "broker %s (cluster %s) listening on %s:%d, advertised as %s, data in %s",
            self.config.broker_name,
            self.config.broker_cluster_name,
            self.config.bind_host,
            server.port,
            self.config.broker_addr,
            self.root_dir,
        )
        self._tasks = [
            asyncio.ensure_future(self._register_loop()),
            asyncio.ensure_future(self._housekeeping_loop()),
            asyncio.ensure_future(sample_every_second(self.stats)),
        ]
        if self.config.load_summary_interval:
            self._tasks.append(
                asyncio.ensure_future(log_load_summaries(self, self.config.load_summary_interval))
            )
        if self.is_slave and not self.config.failover:
            self._start_slave_sync()
        if self.config.namesrv_addr and not await self.register_all():
            self._whole_table_wanted = True
        if self.config.failover:
            cfg = self.config
            self.election = Failover(
                BrokerReplica(self),
                cfg.etcd_endpoint_list,
                cfg.etcd_prefix,
                cfg.broker_cluster_name,
                cfg.broker_name,
                self.own_id,
                cfg.etcd_lease_ttl,
            )
            await self.election.start()

    async def _start_metrics_endpoint(self, metrics: BrokerMetrics) -> None:
        from prometheus_client import CollectorRegistry

        from cometmq.metrics import start_metrics_endpoint

        registry = self._metrics_registry if self._metrics_registry is not None else CollectorRegistry()
        registry.register(metrics)
        cfg = self.config
        self.metrics_endpoint = await start_metrics_endpoint(
            registry, cfg.metrics_prom_exporter_host or cfg.bind_host, cfg.metrics_prom_exporter_port
        )
        log.info("broker %s serves its metrics on %s", cfg.broker_name, self.metrics_endpoint.url)

    async def _start_replication(self, ha_port: int) -> None:
        self._ha_listen_port = ha_port
        if self.config.failover:
            # Bound at start, so the HA address is known to the election before any role: until it
            # decides, this broker is a slave of no master.
            await self._start_ha_server()
        elif self.is_slave:
            self._start_ha_client()
        else:
            self._begin_epoch(self._next_epoch())
            await self._start_ha_server()
            self.sync_master = self.master_role is BrokerRole.SYNC_MASTER

    async def _start_ha_server(self) -> None:
        """A fresh HA server in place of the one running (if any), on the HA port this broker bound
        first: a port the OS picked stays the broker's, free only for the moment between the two. Fresh
        per role: nothing a slave acknowledged to an earlier server (before this broker's log was cut
        back) may answer a send of a later mastership, and sends waiting on the earlier one are answered
        FLUSH_SLAVE_TIMEOUT (stored, not confirmed) rather than losing their answer. While this broker
        is a slave it keeps the port with a server no send waits on."""
        await self._stop_ha_server()
        cfg = self.config
        port = self._ha_listen_port
        ha_server = HAServer(
            self.store,
            dataclasses.replace(cfg.replication_config(), broker_id=self.own_id),
            verify_slave=self._verify_slave if self.access_control is not None else None,
            tls=cfg.tls,
        )
        try:
            await ha_server.start(cfg.bind_host, port)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on the HA port {cfg.bind_host}:{port} (haListenPort, by default "
                f"listenPort + 1): {exc.strerror or exc}"
            ) from None
        self.ha_server = ha_server
        self._ha_listen_port = ha_server.port
        self._ha_bound = True
        if self.config.failover:
            ha_server.set_in_sync(self.in_sync)
            ha_server.on_confirmed = self._served_confirmed
            if self.election is not None:
                ha_server.on_candidates_changed = self.election.in_sync_changed

    def _verify_slave(self, addr: str, access_key: str, content: bytes, signature: bytes) -> str | None:
        """A slave's AUTH on the HA link: it must be a user allowed to Update this broker's cluster."""
        access = self.access_control
        assert access is not None  # given to the HA server only then
        need = Need.of(Resource.of(ResourceType.CLUSTER, self.config.broker_cluster_name), (Action.UPDATE,))
        return access.verify_peer(addr, access_key, content, signature, (need,))

    async def _stop_ha_server(self) -> None:
        self.sync_master = False
        ha_server, self.ha_server = self.ha_server, None
        if ha_server is not None:
            await ha_server.stop()

    def _start_ha_client(self) -> None:
        # haMasterAddress, else the master's HA address the registration (or the election) names. The
        # hello names this broker and the master's epoch it expects (0: any, outside failover).
        self.ha_client = HAClient(
            self.store,
            self.config.replication_config(),
            lambda: self.master_ha_addr,
            broker_id=self.own_id,
            expected_epoch=lambda: self.epoch,
            credentials=self.config.inner_client_credentials,
            ssl_context=self._client_tls,
        )
        if self.config.failover:
            self.ha_client.on_confirmed = self._master_confirmed
        self.ha_client.start()

    async def _stop_ha_client(self) -> None:
        ha_client, self.ha_client = self.ha_client, None
        if ha_client is not None:
            await ha_client.stop()

    async def _stop_replication(self) -> None:
        await self._stop_ha_client()
        await self._stop_ha_server()

    def _next_epoch(self) -> int:
        """A static or manually made master's epoch: one past the last this store holds."""
        epochs = self.store.epochs()
        return (epochs[-1].epoch if epochs else 0) + 1

    def _begin_epoch(self, epoch: int) -> None:
        """Start acting as master of *epoch*: the store cuts a partial trailing record and notes where
        the epoch starts. ValueError unless *epoch* exceeds every epoch the store holds."""
        entry = self.store.begin_epoch(epoch)
        self.epoch = epoch
        log.info(
            "broker %s is master of epoch %d from commit-log offset %d",
            self.config.broker_name,
            epoch,
            entry.start_offset,
        )

    def _start_slave_sync(self) -> None:
        if self._slave_sync_task is None:
            self._slave_sync_task = asyncio.ensure_future(self.slave_sync.run())

    async def _stop_slave_sync(self) -> None:
        task, self._slave_sync_task = self._slave_sync_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # Switching role -----------------------------------------------------------------------------

    async def become_master(self, epoch: int) -> None:
        """Act as the group's master of *epoch* from now on: stop following (the log as replicated so
        far is final), start the epoch, serve sends, deliver delayed messages, and register as id 0
        (soon, not before this returns). *epoch* must exceed every epoch this store holds (ValueError,
        with the broker still serving as before, though no longer replicating)."""
        async with self._role_lock:
            if not self._slave and self.epoch == epoch:
                return  # master of this epoch already (the election took it up again)
            was_slave = self._slave
            # Nothing may arrive from the old master once the epoch began; and the epoch begins before
            # anything is torn down, so that an epoch the store refuses leaves the HA port served.
            await self._stop_ha_client()
            self._begin_epoch(epoch)
            await self._stop_slave_sync()
            await self._stop_ha_server()
            # The in-sync set of this mastership starts with this broker alone, whatever an earlier one
            # had, until the election commits more.
            self.in_sync = frozenset({self.own_id})
            await self._start_ha_server()
            # The keys are rebuilt from the final log before the role says master, so that nobody who
            # sees is_slave false meets the slave's table or a send stored twice.
            await asyncio.get_running_loop().run_in_executor(None, self.deduplicator.rebuild)
            self._switched_epoch = epoch
            self._slave = False
            self.sync_master = self.master_role is BrokerRole.SYNC_MASTER
            self.master_addr = None
            self._switch_table()
            limit = self.read_limit()
            if limit is not None:  # pulls held for what this broker's old master had confirmed
                self.pull_holds.on_confirmed(limit)
            self.schedule.start()
            self.timer.start()
            self.transactions.start()
            log.info("broker %s is now the master of its group (epoch %d)", self.config.broker_name, epoch)
            if was_slave:
                self._register_switch(self.own_id)

    async def become_slave(self, master_addr: str | None, master_ha_addr: str | None, epoch: int) -> None:
        """Act as a slave under this broker's own brokerId from now on, following the master at
        *master_addr* / *master_ha_addr* (None: whichever the NameServer names) of *epoch* (0: any).
        Sends are refused at once; SYNC sends waiting for a slave are answered FLUSH_SLAVE_TIMEOUT.
        ConfigError when the own brokerId is not 1 or more."""
        if self.own_id < 1:
            raise ConfigError(
                f"broker {self.config.broker_name} cannot become a slave: its brokerId is {self.own_id}, "
                "and a slave needs brokerId 1 or more (0 is the master's id)"
            )
        async with self._role_lock:
            was_master = not self._slave
            if was_master and self.config.failover:
                self.confirmed = self.read_limit() or 0  # reads stay below it until the handshake
            self._slave = True
            self._switched_epoch = 0
            self._switch_table()  # refuse sends before anything else
            self.deduplicator.clear()  # rebuilt from the log when this broker is master again
            self.pop.follow_master()
            if self._ha_bound:
                await self._start_ha_server()
            await self.schedule.stop()
            await self.timer.stop()
            await self.transactions.stop()
            await self._stop_ha_client()
            self.epoch = epoch
            self.master_addr = master_addr
            self.master_ha_addr = master_ha_addr
            self._start_ha_client()
            self._start_slave_sync()
            if master_addr is not None:
                log.info(
                    "broker %s is now a slave of %s (HA %s, epoch %d)",
                    self.config.broker_name,
                    master_addr,
                    master_ha_addr,
                    epoch,
                )
            else:
                log.info(
                    "broker %s is now a slave of the master the NameServer names", self.config.broker_name
                )
            if was_master:
                self._register_switch(0)

    async def stop_following(self) -> None:
        """Stop replicating from the master: this broker's log is final until it follows again."""
        async with self._role_lock:
            await self._stop_ha_client()

    def set_in_sync(self, members: frozenset[int]) -> None:
        """Failover mode: the in-sync set as committed in etcd, which a SYNC_MASTER's sends wait for."""
        self.in_sync = members
        if self.ha_server is not None:
            self.ha_server.set_in_sync(members)

    def in_sync_refusal(self) -> str | None:
        """Failover mode: why a SYNC_MASTER refuses a send before storing it (RocketMQ's answer when its
        in-sync set is smaller than minInSyncReplicas), or None."""
        least = self.config.min_in_sync_replicas
        if self.sync_master and len(self.in_sync) < least:
            return (
                f"in-sync replicas not enough: the in-sync set {sorted(self.in_sync)} has fewer than "
                f"minInSyncReplicas {least} brokers"
            )
        return None

    def read_limit(self) -> int | None:
        """Failover mode: the commit-log offset pulls read up to, the confirmed offset (RocketMQ 5's
        confirmOffset): a master's is what every member of its in-sync set acknowledged, a slave's the
        last its master sent, and a broker just demoted keeps its last as master until the handshake
        with its new master (and any truncation) is done. None outside failover mode: no limit."""
        if not self.config.failover:
            return None
        if not self._slave and self.ha_server is not None:
            return self.ha_server.confirmed_offset()
        return self.confirmed

    def _served_confirmed(self, confirmed: int) -> None:
        """The HA server's listener: its confirmed offset limits reads only while this broker is master
        (a slave's limit is its master's)."""
        if not self._slave:
            self.pull_holds.on_confirmed(confirmed)

    def _master_confirmed(self, confirmed: int) -> None:
        """The HA client's listener: the master's confirmed offset as its chunk headers say."""
        self.confirmed = confirmed
        self.pull_holds.on_confirmed(confirmed)

    def _failsafe_applies(self) -> bool:
        """Failover mode, the lease not trusted: whether this master may still acknowledge what every
        other in-sync member has. Only while etcd is known unreachable (a master deposed meanwhile
        would learn it from etcd, and then acknowledges nothing), and only with another member in the
        in-sync set: only its members could be elected, and a candidate stops following its master
        before it reports its end."""
        election = self.election
        return (
            election is not None
            and not election.etcd_reachable
            and not self._slave
            and self.ha_server is not None
            and len(self.in_sync) >= 2
        )

    def mastership_refusal(self) -> str | None:
        """Failover mode: why this master refuses a send before storing it (its lease is not trusted
        and the failsafe cannot apply), or None."""
        election = self.election
        if election is None or election.lease_trusted() or self._failsafe_applies():
            return None
        return MASTERSHIP_NOT_TRUSTED

    def mastership_lapsed(self, end: int) -> bool:
        """Failover mode: whether a send stored up to *end* may not be answered SEND_OK. It may while
        the mastership lease is trusted, or while the failsafe applies and every other in-sync member
        acknowledged *end*."""
        election = self.election
        if election is None or election.lease_trusted():
            return False
        ha_server = self.ha_server
        return not (
            self._failsafe_applies() and ha_server is not None and ha_server.acknowledged_by_all_in_sync(end)
        )

    def _switch_table(self) -> None:
        if self._dispatch is not None:
            self._dispatch.replace(self._processor_table())

    def _register_switch(self, old_id: int) -> None:
        """Tell the NameServers of the switch soon, from the registration task rather than the switch
        (a NameServer that does not answer costs seconds a call): the entry under the old id goes, the
        new one comes."""
        self._stale_ids.add(old_id)
        self.request_register()

    async def _unregister_stale(self, *, stopping: bool = False) -> None:
        """Unregister the ids of earlier roles; stopping, the one registered under now as well. An id
        is forgotten once tried (the NameServer drops an entry silent for 120 s anyway)."""
        registered = self.registered_id
        if stopping:
            self._stale_ids.add(registered)
        else:
            self._stale_ids.discard(registered)
        for broker_id in sorted(self._stale_ids):
            with contextlib.suppress(CometMQError, OSError):
                await self._unregister_all(broker_id)
            self._stale_ids.discard(broker_id)

    async def role_changed(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """NOTIFY_BROKER_ROLE_CHANGED (``cometmq broker promote/demote``): named as the master, become
        it with the epoch given; otherwise become a slave following the NameServer's master."""
        notice = NotifyBrokerRoleChangedRequestHeader.decode(request.ext_fields)
        cfg = self.config
        if cfg.failover:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"failover is run by etcd here ({cfg.etcd_endpoints}): roles cannot be switched by hand",
            )
        if notice.master_address == cfg.broker_addr:
            if notice.master_epoch < self._next_epoch():
                raise RequestRefused(
                    ResponseCode.SYSTEM_ERROR,
                    f"epoch {notice.master_epoch} is not past this broker's last epoch "
                    f"{self._next_epoch() - 1}",
                )
            await self.become_master(notice.master_epoch)
        else:
            try:
                await self.become_slave(None, None, 0)
            except ConfigError as exc:
                raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        return request.response()

    def _connection_closed(self, conn: Connection) -> None:
        self.pull_holds.drop_connection(conn)
        self.pop.drop_connection(conn)
        self.producers.remove_connection(conn)
        for group in self.consumers.remove_connection(conn):
            self.consumers.notify_ids_changed(group)

    async def stop(self) -> None:
        """Stop serving, tell the NameServer, and flush and persist everything."""
        if self.election is not None:
            # First: revoking the lease hands the mastership over at once, and no role switch starts
            # anything (a slave-sync task) after what follows stopped it.
            await self.election.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self._stop_slave_sync()
        self.pull_holds.wake_all()
        await self.pop.stop()  # held pops answered while their connections are open
        if self.ha_server is not None:
            # While the clients are still connected: SYNC sends waiting for a slave are answered
            # FLUSH_SLAVE_TIMEOUT (stored, not confirmed), later ones SLAVE_NOT_AVAILABLE, rather than
            # losing their answer with the connection (a producer would send them again).
            await self.ha_server.stop()
        if self._server is not None:
            await self._server.stop()
            self._server = None
        self.pop.close()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
            self.metrics_endpoint = None
        await self._stop_replication()
        if self.config.namesrv_addr:
            await self._unregister_stale(stopping=True)
        await self._namesrv_client.close()
        await self.access.stop()
        # A metadata file that cannot be written (disk error) is logged; the others are still
        # written and the store still shuts down cleanly (flushed, checkpointed, abort file removed).
        await self.schedule.stop()
        await self.timer.stop()
        await self.transactions.stop()  # its progress is in the consumer offsets written next
        self.offsets.persist(force=True)
        self.topics.persist()
        self.groups.persist()
        for name, manager in (
            ("delay offsets", self.schedule),
            ("timer progress", self.timer),
            ("consumer offsets", self.offsets),
            ("topics", self.topics),
            ("subscription groups", self.groups),
        ):
            if manager.write_pending:
                log.error("cannot write the %s at shutdown; the file keeps an older table", name)
        await asyncio.get_running_loop().run_in_executor(None, self.store.shutdown)
        log.info("broker %s stopped", self.config.broker_name)

    # NameServer registration ------------------------------------------------------------------

    def request_register(self) -> None:
        """Register the whole topic table with the NameServer soon, not only on the 30 s period."""
        self._whole_table_wanted = True
        self._register_wanted.set()

    def _topic_changed(self, topic: str | None) -> None:
        if topic is None:
            self.request_register()
        else:
            self._topics_to_register.add(topic)
            self._register_wanted.set()

    def _namesrv_addresses(self) -> list[str]:
        return [addr.strip() for addr in self.config.namesrv_addr.split(";") if addr.strip()]

    async def register_all(self, topics: Iterable[str] | None = None) -> bool:
        """Register with every NameServer: the whole topic table, or only *topics* with those that
        have the whole table already (over the same connection). Whether every NameServer took it."""
        cfg = self.config
        header = RegisterBrokerRequestHeader(
            broker_name=cfg.broker_name,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.broker_cluster_name,
            ha_server_addr=f"{cfg.broker_ip1}:{self.ha_port}",
            broker_id=self.registered_id,
            master_epoch=self._switched_epoch,
        )
        whole: bytes | None = None
        changed = (
            None if topics is None else self.topics.register_body(cfg.broker_permission, topics).encode()
        )
        answered: RemotingCommand | None = None
        taken = True
        for addr in self._namesrv_addresses():
            connection = self._namesrv_client.open_connection(addr)
            if (
                changed is not None
                and connection is not None
                and self._table_registered_over.get(addr) is connection
            ):
                body = changed
            else:
                if whole is None:
                    whole = self.topics.register_body(cfg.broker_permission).encode()
                body = whole
            request = RemotingCommand(code=RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=body)
            try:
                response = await self._namesrv_client.invoke(addr, request, timeout=6.0)
            except (CometMQError, OSError) as exc:
                log.warning("registering with the NameServer %s failed: %s", addr, exc)
                taken = False
                continue
            if response.code != ResponseCode.SUCCESS:
                log.warning("the NameServer %s refused the registration: %s", addr, response.remark)
                taken = False
                continue
            if body is whole:
                connection = self._namesrv_client.open_connection(addr)
                if connection is not None:
                    self._table_registered_over[addr] = connection
            if answered is None:
                answered = response
        if answered is not None and self.is_slave and not cfg.failover:
            self._learn_master(answered)
        return taken

    def _learn_master(self, answer: RemotingCommand) -> None:
        """A slave's master from the first NameServer's answer, as RocketMQ's slave takes it: the
        remoting address always (none while the group has no live master), the HA address only when
        one is given."""
        try:
            master, ha_addr = master_named(answer)
        except CometMQError as exc:
            log.warning("the NameServer's answer to the registration is malformed: %s", exc)
            return
        changed = master != self.master_addr or (ha_addr is not None and ha_addr != self.master_ha_addr)
        self.master_addr = master
        if ha_addr is not None:
            self.master_ha_addr = ha_addr
        if not changed:
            return
        if master is None:
            log.warning("the NameServer names no master of %s any more", self.config.broker_name)
        else:
            log.info("the master of %s is %s (HA %s)", self.config.broker_name, master, self.master_ha_addr)
            if self.ha_client is not None:
                self.ha_client.master_changed()

    async def _unregister_all(self, broker_id: int) -> None:
        cfg = self.config
        header = BrokerRequestHeader(
            broker_name=cfg.broker_name,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.broker_cluster_name,
            broker_id=broker_id,
        )
        for addr in self._namesrv_addresses():
            request = RemotingCommand(code=RequestCode.UNREGISTER_BROKER, ext_fields=header.encode())
            await self._namesrv_client.invoke(addr, request, timeout=3.0)

    async def _register_loop(self) -> None:
        period = self.config.register_name_server_period / 1000
        loop = asyncio.get_running_loop()
        whole_table_due = loop.time() + period
        while True:
            # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that comes as the event is
            # set, and stop() would wait for this task for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(whole_table_due):
                    await self._register_wanted.wait()
            self._register_wanted.clear()
            # A registration only the NameServer's version check would drop is harmless; one that
            # leaves out topics a NameServer has not taken yet is not: after any failure, the whole
            # table goes next.
            if self._whole_table_wanted or loop.time() >= whole_table_due:
                topics: set[str] | None = None
                whole_table_due = loop.time() + period
            else:
                topics = self._topics_to_register
            self._whole_table_wanted = False
            self._topics_to_register = set()
            if self.config.namesrv_addr:
                try:
                    await self._unregister_stale()
                    taken = await self.register_all(topics)
                except Exception:  # one bad round must not end registration for good
                    log.exception("registering with the NameServer failed")
                    taken = False
                if not taken:
                    self._whole_table_wanted = True

    async def _housekeeping_loop(self) -> None:
        loop = asyncio.get_running_loop()
        # RocketMQ's flushConsumerOffsetInterval; a crash loses the commits of at most one interval.
        offsets_every = max(self.config.flush_consumer_offset_interval, 10) / 1000
        # RocketMQ's cleanResourceInterval: retention and the disk guard.
        clean_every = max(self.config.clean_resource_interval, 10) / 1000
        last_offsets = last_scan = last_clean = time.monotonic()
        while True:
            await asyncio.sleep(min(1.0, offsets_every, clean_every))
            now = time.monotonic()
            try:
                if now - last_offsets >= offsets_every:
                    last_offsets = now
                    # The snapshot is taken here; the fsyncs run off the event loop.
                    write = self.offsets.persist_later()
                    if write is not None:
                        await loop.run_in_executor(None, write)
                    # Metadata writes that failed (disk full) are made again until they succeed.
                    for table in (self.topics, self.groups):
                        if table.write_pending:
                            table.persist()
                if now - last_scan >= CLIENT_SCAN_INTERVAL_S:
                    last_scan = now
                    self.producers.expire(now)
                    for group in set(self.consumers.expire(now)):
                        self.consumers.notify_ids_changed(group)
                if now - last_clean >= clean_every:
                    last_clean = now
                    self.store.clean()  # on this thread: the store's single writer
            except Exception:  # keep housekeeping alive; the next round tries again
                log.exception("broker housekeeping failed")
