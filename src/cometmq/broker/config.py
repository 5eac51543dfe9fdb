"""Broker configuration under RocketMQ's own key names, so a RocketMQ ``broker.conf`` works as is.

Attribute ``listen_port`` is RocketMQ key ``listenPort``. Settings come in as text (a file, flags)
and are converted once, here, to the attribute's type: ``flushDiskType`` becomes the store's
:class:`FlushDiskType`, ``brokerRole`` a :class:`BrokerRole`; nothing else parses them again.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cometmq.auth import Credentials
from cometmq.auth.serving import AclSettings
from cometmq.errors import ConfigError
from cometmq.javaprops import apply_properties, converted, key_of, read_properties
from cometmq.metrics import DEFAULT_PROM_EXPORTER_PORT, MetricsExporterType
from cometmq.protocol import MAX_FRAME_SIZE
from cometmq.protocol.naming import TRACE_TOPIC, topic_name_error
from cometmq.protocol.topic_config import MAX_PERM, MAX_QUEUE_NUMS
from cometmq.remoting import (
    BROKER_LIMIT_US,
    DEFAULT_MAX_PARTIAL_FRAME_BYTES,
    MAX_LIMIT_US,
    ServerLimits,
    default_max_connections,
)
from cometmq.remoting.tls import TLS_KEYS, TlsSettings
from cometmq.replication import ReplicationConfig
from cometmq.store import FlushDiskType, StoreConfig, parse_delay_levels, parse_delete_when

log = logging.getLogger("cometmq.broker")

DEFAULT_DATA_DIR = Path.home() / ".cometmq" / "data"


class BrokerRole(enum.Enum):
    """RocketMQ's brokerRole: the role a broker starts in (docs/operations.md, "Roles"). In failover
    mode the election decides the role, and this only says how the broker acknowledges sends while it
    is master (SLAVE is read as ASYNC_MASTER)."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass(slots=True)
class BrokerConfig:
    """Every setting the broker reads. Attribute ``listen_port`` is RocketMQ key ``listenPort``."""

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_ip1: str = "127.0.0.1"  # the address advertised to clients (RocketMQ's brokerIP1)
    listen_port: int = 10911
    # Not a RocketMQ key: the interface to bind; empty is brokerIP1's (RocketMQ binds all), so a broker
    # told nothing listens on this machine only, as the name server and standalone do.
    listen_host: str = ""
    namesrv_addr: str = ""
    store_path_root_dir: str = field(default_factory=lambda: str(DEFAULT_DATA_DIR))
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    broker_permission: int = 6
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    mapped_file_size_commit_log: int = 1 << 30
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    sync_flush_timeout: int = 5000
    # ms between writes of consumerOffset.json; commits of the last interval are lost by a crash
    flush_consumer_offset_interval: int = 5000
    max_message_size: int = 4 * 1024 * 1024
    # RocketMQ 5's record CRC, off by default (docs/store.md, "Record CRC").
    enabled_append_prop_crc: bool = False
    force_verify_prop_crc: bool = False
    # Delay of each level of delayed messages (DELAY=1 is the first); see broker/_schedule.py.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    # RocketMQ 5's timer messages (broker/_timer.py): whether they are taken at all, and how far ahead
    # a delivery time may be (3 days, RocketMQ's default).
    timer_wheel_enable: bool = True
    timer_max_delay_sec: int = 3 * 86_400
    # RocketMQ 5: whether a topic may be created or changed with message.type MIXED.
    enable_mixed_message_type: bool = False
    # Transactional messages (broker/_transaction.py): a half message is checked back once it is
    # older than transactionTimeOut ms, every transactionCheckInterval ms (RocketMQ 5's period; 4.x
    # had 60 s), and discarded after transactionCheckMax checks; rejectTransactionMessage refuses them.
    transaction_time_out: int = 6000
    transaction_check_interval: int = 30_000
    transaction_check_max: int = 15
    reject_transaction_message: bool = False
    # The message index behind QUERY_MESSAGE (docs/store.md, "Index").
    message_index_enable: bool = True
    max_index_num: int = 20_000_000
    # Producing exactly once (docs/operations.md, "Deduplication"), CometMQ's own keys: whether a send
    # whose UNIQ_KEY this broker stored in its topic within the window is answered with the first copy
    # instead of being stored again (the broker-wide default; a topic's `deduplication` attribute
    # overrides it), the window in seconds, and the most keys remembered.
    deduplication_enable: bool = False
    deduplication_window_seconds: int = 300
    deduplication_max_keys: int = 1_000_000
    # Retention and the disk guard (docs/store.md, "Retention and the disk guard").
    file_reserved_time: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    clean_file_forcibly_enable: bool = True
    delete_file_batch_max: int = 10
    clean_resource_interval: int = 10_000
    register_name_server_period: int = 30_000
    long_polling_enable: bool = True
    # SQL92 property filters (docs/filters.md); off by default as in RocketMQ, on in `cometmq standalone`.
    enable_property_filter: bool = False
    short_polling_time_mills: int = 1000
    # Roles and reads from slaves (docs/operations.md, "Roles"): whether pull answers steer a consumer
    # that is far behind to a slave; how far behind counts (the commit-log bytes past what it reads,
    # as a percentage of the machine's RAM); whether a slave corrects a pull's offset.
    slave_read_enable: bool = False
    access_message_in_memory_max_ratio: int = 40
    offset_check_in_slave: bool = False
    # Not RocketMQ keys: the most µs the event loop keeps polling after each read or write instead of
    # sleeping, a window that adapts to the gaps between requests and closes when they stop
    # (cometmq/remoting/busypoll.py); with busyPollAdaptive=false, the whole limit every time; 0: never.
    busy_poll_micros: int = BROKER_LIMIT_US
    busy_poll_adaptive: bool = True
    # Not a RocketMQ key: seconds between the broker's one-line load summaries in its log; 0: none.
    load_summary_interval: int = 60
    # What clients may make the broker hold (docs/operations.md, "Connection limits"). The first two
    # are RocketMQ's (NettyServerConfig); the other two are not RocketMQ keys.
    server_channel_max_idle_time_seconds: int = 120
    server_socket_backlog: int = 1024
    server_max_connections: int = field(default_factory=default_max_connections)
    server_max_partial_frame_bytes: int = DEFAULT_MAX_PARTIAL_FRAME_BYTES
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    # Message trace (docs/client.md#message-trace): whether the broker creates the trace topic (one
    # queue, as RocketMQ's) at start, and its name. Off by default as in RocketMQ, on in standalone.
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = TRACE_TOPIC
    # Replication (docs/operations.md, "Replication"): RocketMQ's HA keys and their 4.9.8 defaults.
    # haListenPort: -1 is listenPort + 1 (a port the OS picks when listenPort is 0). A value given is
    # used, where RocketMQ 4.9 overwrites it with listenPort + 1.
    ha_listen_port: int = -1
    ha_master_address: str = ""  # a slave's master HA address; empty: learned from the NameServer
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32768
    ha_max_gap_not_in_sync: int = 268_435_456  # 4.9's name, haSlaveFallbehindMax, is read too
    slave_timeout: int = 3000  # ms a SYNC_MASTER send waits for a slave (RocketMQ 4.9.3+)
    # In failover mode (RocketMQ 5's controller keys): a SYNC_MASTER refuses a send while its in-sync set
    # is smaller than minInSyncReplicas; with allAckInSyncStateSet a send waits for every in-sync slave
    # (CometMQ's default is true, RocketMQ's false: only then does every broker that may be elected hold
    # every acknowledged message); a slave is in sync while it caught up with the master within the
    # last haMaxTimeSlaveNotCatchup ms.
    min_in_sync_replicas: int = 1
    all_ack_in_sync_state_set: bool = True
    ha_max_time_slave_not_catchup: int = 15_000
    # Failover (docs/operations.md, "Failover"), CometMQ's own keys: the etcd endpoints (host:port,
    # comma-separated; empty: static roles), the prefix of the group's keys, and the lease TTL in
    # seconds (a failover takes about this long).
    etcd_endpoints: str = ""
    etcd_prefix: str = "/cometmq"
    etcd_lease_ttl: int = 5
    # Access control (docs/security.md): RocketMQ 4.x's aclEnable and plainAclFile, RocketMQ 5's
    # initAuthenticationUser and innerClientAuthenticationCredentials; authConfigPath empty is
    # <storePathRootDir>/config. The two JSON values hold secrets: kept out of the repr.
    acl_enable: bool = False
    plain_acl_file: str = ""
    auth_config_path: str = ""
    init_authentication_user: str = field(default="", repr=False)
    inner_client_credentials: Credentials | None = field(default=None, repr=False)
    # TLS (docs/security.md): RocketMQ's tls.* keys (cometmq.remoting.tls), the ones of one source
    # (the file, the flags) taken together.
    tls: TlsSettings = field(default_factory=TlsSettings)
    # Prometheus metrics (docs/metrics.md), RocketMQ 5's keys: PROM serves /metrics on
    # metricsPromExporterHost (empty: the host the broker listens on) : metricsPromExporterPort.
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: int = DEFAULT_PROM_EXPORTER_PORT

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def bind_host(self) -> str:
        """The interface the broker's ports listen on: listenHost, else brokerIP1's."""
        return self.listen_host or self.broker_ip1

    @property
    def ha_port(self) -> int:
        """The port of the HA server (a master's), before it listens."""
        if self.ha_listen_port >= 0:
            return self.ha_listen_port
        if self.listen_port >= 65535:
            raise ConfigError(
                f"listenPort {self.listen_port} leaves no port for the HA server (listenPort + 1): "
                "set haListenPort"
            )
        return self.listen_port + 1 if self.listen_port else 0

    @property
    def failover(self) -> bool:
        """Whether an election on etcd decides the role (etcdEndpoints given), not brokerRole."""
        return bool(self.etcd_endpoint_list)

    @property
    def etcd_endpoint_list(self) -> list[str]:
        return [endpoint.strip() for endpoint in self.etcd_endpoints.split(",") if endpoint.strip()]

    def acl_settings(self) -> AclSettings:
        """The access-control settings; authConfigPath empty is <storePathRootDir>/config."""
        directory = self.auth_config_path or str(Path(self.store_path_root_dir) / "config")
        return AclSettings(
            enabled=self.acl_enable,
            plain_acl_file=self.plain_acl_file,
            auth_config_path=Path(directory).expanduser(),
            init_authentication_user=self.init_authentication_user,
        )

    def replication_config(self) -> ReplicationConfig:
        return ReplicationConfig(
            master_address=self.ha_master_address.strip(),
            heartbeat_interval_ms=self.ha_send_heartbeat_interval,
            housekeeping_interval_ms=self.ha_housekeeping_interval,
            transfer_batch_size=self.ha_transfer_batch_size,
            max_gap_not_in_sync=self.ha_max_gap_not_in_sync,
            slave_timeout_ms=self.slave_timeout,
            segment_size=self.mapped_file_size_commit_log,
            broker_id=self.broker_id,
            all_ack_in_sync=self.all_ack_in_sync_state_set,
            max_time_slave_not_catchup_ms=self.ha_max_time_slave_not_catchup,
        )

    def update(self, values: Mapping[str, Any], source: str = "the broker settings") -> None:
        """Apply settings given by RocketMQ key (``listenPort``) or attribute name (``listen_port``).

        A key CometMQ does not know is ignored, as RocketMQ ignores keys it does not know, with a
        warning naming the closest known key; a RocketMQ key CometMQ does not use is ignored with one
        info line. A value that cannot be converted raises ConfigError naming the key. *source*
        names where the values come from, in those messages.
        """
        self.tls = self.tls.updated(values)
        unknown = apply_properties(
            self, values, _KEY_OF_ATTRIBUTE, _ATTRIBUTE_OF_KEY, convert=_converted, skip=TLS_KEYS
        )
        not_used = [key for key in unknown if key in ROCKETMQ_KEYS_NOT_USED]
        for key in unknown:
            if key not in ROCKETMQ_KEYS_NOT_USED:
                log.warning(_unknown_key_message(key, source))
        if not_used:
            log.info("RocketMQ keys not used by CometMQ in %s, ignored: %s", source, ", ".join(not_used))
        self._check()

    def properties(self) -> dict[str, str]:
        """Every setting as RocketMQ key and text (GET_BROKER_CONFIG), sorted by key; the secrets
        (innerClientAuthenticationCredentials, initAuthenticationUser) and the tls.* keys left out."""
        shown = {
            key: _text_of(getattr(self, name))
            for name, key in _KEY_OF_ATTRIBUTE.items()
            if name not in _NOT_SHOWN
        }
        return dict(sorted(shown.items()))

    def change_at_run_time(self, values: Mapping[str, str], source: str) -> None:
        """Apply settings changed while the broker runs (UPDATE_BROKER_CONFIG, or the file that keeps
        them): ConfigError naming a key that is not one of RUNTIME_KEYS, or a value it cannot take;
        then nothing is changed."""
        refusal = fixed_at_start(values)
        if refusal is not None:
            raise ConfigError(refusal)
        for key, text in values.items():
            # Stricter than broker.conf (Boolean.parseBoolean reads any other text as false): a value
            # set on a running broker is one the operator means, so "maybe" is a mistake to report.
            is_boolean = isinstance(getattr(self, _ATTRIBUTE_OF_KEY[key]), bool)
            if is_boolean and text.strip().lower() not in ("true", "false"):
                raise ConfigError(f"{key}={text!r} is not a boolean: give true or false")
        trial = dataclasses.replace(self)
        trial.update(values, source)
        if not 0 <= trial.broker_permission <= MAX_PERM:
            raise ConfigError(
                f"brokerPermission {trial.broker_permission} is not a permission (0 to {MAX_PERM})"
            )
        if not 1 <= trial.default_topic_queue_nums <= MAX_QUEUE_NUMS:
            raise ConfigError(
                f"defaultTopicQueueNums {trial.default_topic_queue_nums} is not in 1..{MAX_QUEUE_NUMS}"
            )
        if trial.short_polling_time_mills < 0:
            raise ConfigError(f"shortPollingTimeMills {trial.short_polling_time_mills} is negative")
        for key in values:
            name = _ATTRIBUTE_OF_KEY[key]
            setattr(self, name, getattr(trial, name))

    def settle_role(self) -> None:
        """RocketMQ's role rules, applied once the settings are final (a broker is made from them):
        a SLAVE needs brokerId 1 or more (ConfigError), a master's brokerId is 0 whatever was set.

        In failover mode the election decides the role: brokerId is the broker's identity in its group
        (1 or more, distinct per broker), and brokerRole only says how a master acknowledges (a SLAVE
        acknowledges as an ASYNC_MASTER)."""
        if self.failover:
            if self.broker_id < 1:
                raise ConfigError(
                    f"failover (etcdEndpoints) needs brokerId 1 or more, distinct for each broker of the "
                    f"group {self.broker_name}, not {self.broker_id} (set brokerId, or --broker-id)"
                )
            if self.broker_role is BrokerRole.SLAVE:
                log.info(
                    "brokerRole SLAVE read as ASYNC_MASTER: with failover the election decides the role, "
                    "brokerRole only how a master acknowledges"
                )
                self.broker_role = BrokerRole.ASYNC_MASTER
            return
        if self.broker_role is BrokerRole.SLAVE:
            if self.broker_id < 1:
                raise ConfigError(
                    f"brokerRole=SLAVE needs brokerId 1 or more (0 is the master's id), not "
                    f"{self.broker_id} (set brokerId, or --broker-id)"
                )
        elif self.broker_id != 0:
            log.info("brokerId %d set to 0: a %s is its group's id 0", self.broker_id, self.broker_role.value)
            self.broker_id = 0

    def check_access(self) -> None:
        """Once the settings are final: a broker with aclEnable signs what it sends to name servers and
        to its master, so it needs credentials of its own (ConfigError naming the key otherwise)."""
        if self.acl_enable and self.inner_client_credentials is None:
            raise ConfigError(
                "aclEnable=true needs innerClientAuthenticationCredentials "
                '({"accessKey": "..", "secretKey": ".."}): the broker signs its registrations with the '
                "name servers and a slave its requests to the master with them"
            )

    def _check(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort {self.listen_port} is not a port number")
        if not 0 <= self.metrics_prom_exporter_port <= 65535:
            raise ConfigError(
                f"metricsPromExporterPort {self.metrics_prom_exporter_port} is not a port number"
            )
        if self.busy_poll_micros < 0:
            raise ConfigError(f"busyPollMicros {self.busy_poll_micros} is negative")
        if self.busy_poll_micros > MAX_LIMIT_US:
            raise ConfigError(f"busyPollMicros {self.busy_poll_micros} is over its cap of {MAX_LIMIT_US} µs")
        if self.load_summary_interval < 0:
            raise ConfigError(f"loadSummaryInterval {self.load_summary_interval} is negative")
        if not 0 <= self.access_message_in_memory_max_ratio <= 100:
            raise ConfigError(
                f"accessMessageInMemoryMaxRatio {self.access_message_in_memory_max_ratio} is not a "
                "percentage (0 to 100)"
            )
        if self.server_channel_max_idle_time_seconds < 0:
            raise ConfigError(
                f"serverChannelMaxIdleTimeSeconds {self.server_channel_max_idle_time_seconds} is negative"
            )
        for key, value in (
            ("serverSocketBacklog", self.server_socket_backlog),
            ("serverMaxConnections", self.server_max_connections),
        ):
            if value < 1:
                raise ConfigError(f"{key} {value} is not a positive number")
        if self.server_max_partial_frame_bytes < MAX_FRAME_SIZE:
            raise ConfigError(
                f"serverMaxPartialFrameBytes {self.server_max_partial_frame_bytes} is less than one frame "
                f"of the largest size ({MAX_FRAME_SIZE} bytes)"
            )
        if self.trace_topic_enable and (problem := topic_name_error(self.msg_trace_topic_name)):
            raise ConfigError(f"msgTraceTopicName {self.msg_trace_topic_name!r}: {problem}")
        try:
            parse_delete_when(self.delete_when)
            if not parse_delay_levels(self.message_delay_level):
                raise ValueError("messageDelayLevel names no delay level")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self._check_ranges()
        self._check_replication()

    def _check_replication(self) -> None:
        if not -1 <= self.ha_listen_port <= 65535:
            raise ConfigError(f"haListenPort {self.ha_listen_port} is not a port number")
        for key, value in (
            ("haSendHeartbeatInterval", self.ha_send_heartbeat_interval),
            ("haHousekeepingInterval", self.ha_housekeeping_interval),
            ("haTransferBatchSize", self.ha_transfer_batch_size),
            ("haMaxGapNotInSync", self.ha_max_gap_not_in_sync),
            ("slaveTimeout", self.slave_timeout),
            ("minInSyncReplicas", self.min_in_sync_replicas),
            ("haMaxTimeSlaveNotCatchup", self.ha_max_time_slave_not_catchup),
            ("etcdLeaseTtl", self.etcd_lease_ttl),
        ):
            if value < 1:
                raise ConfigError(f"{key} {value} is not a positive number")

    def _check_ranges(self) -> None:
        day_ms = 86_400_000
        for key, value, most in (
            # A week: the keys of a longer window would have to outlive most retention settings.
            ("deduplicationWindowSeconds", self.deduplication_window_seconds, 7 * 24 * 3600),
            # About 200 bytes a key (docs/operations.md): 100 million keys is some 20 GB of memory.
            ("deduplicationMaxKeys", self.deduplication_max_keys, 100_000_000),
            ("transactionTimeOut", self.transaction_time_out, 7 * day_ms),
            ("transactionCheckInterval", self.transaction_check_interval, day_ms),
            ("transactionCheckMax", self.transaction_check_max, 10_000),
            # Ten years: a delivery time is a Java long of ms either way, this only keeps typos out.
            ("timerMaxDelaySec", self.timer_max_delay_sec, 3650 * 86_400),
        ):
            if not 1 <= value <= most:
                raise ConfigError(f"{key} {value} is not in 1..{most}")

    @classmethod
    def from_file(cls, path: str | Path, defaults: Mapping[str, Any] | None = None) -> BrokerConfig:
        """A config from a RocketMQ ``broker.conf`` (Java properties), on top of *defaults*."""
        try:
            values = read_properties(path)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        config = cls()
        config.update(defaults or {})
        config.update(values, source=str(path))
        return config

    def server_limits(self) -> ServerLimits:
        """What the broker's clients may make it hold, from the server* settings."""
        return ServerLimits(
            channel_max_idle_s=self.server_channel_max_idle_time_seconds,
            max_connections=self.server_max_connections,
            max_partial_frame_bytes=self.server_max_partial_frame_bytes,
            socket_backlog=self.server_socket_backlog,
        )

    def store_config(self, disk_usage_probe: Callable[[Path], float] | None = None) -> StoreConfig:
        """The store's settings: every setting the store has, taken from the one of this config that
        bears its name. *disk_usage_probe* replaces measuring the store's filesystem (tests)."""
        values = {setting: getattr(self, name) for name, setting in _STORE_SETTING_OF_ATTRIBUTE.items()}
        values["root_dir"] = Path(self.store_path_root_dir).expanduser()
        return StoreConfig(**values, disk_usage_probe=disk_usage_probe)


# RocketMQ keys a real broker.conf may carry that CometMQ has no use for. They are ignored with one
# info line rather than a warning each, so that the configurations RocketMQ ships (conf/broker.conf,
# conf/2m-2s-*/, conf/dledger/) and the usual tuning start without noise.
ROCKETMQ_KEYS_NOT_USED = frozenset(
    {
        # Where RocketMQ puts its files apart: CometMQ keeps all of them under storePathRootDir.
        "rocketmqHome",
        "storePathCommitLog",
        "storePathDLedgerCommitLog",
        # DLedger (Raft commit log) replication, and a second advertised address: not built.
        "brokerIP2",
        "enableDLegerCommitLog",
        "dLegerGroup",
        "dLegerPeers",
        "dLegerSelfId",
        # The Java broker's thread pools and their queues: one event loop serves every request.
        "sendMessageThreadPoolNums",
        "pullMessageThreadPoolNums",
        "queryMessageThreadPoolNums",
        "adminBrokerThreadPoolNums",
        "clientManageThreadPoolNums",
        "consumerManageThreadPoolNums",
        "heartbeatThreadPoolNums",
        "endTransactionThreadPoolNums",
        "serverWorkerThreads",
        "serverSelectorThreads",
        "waitTimeMillsInSendQueue",
        "waitTimeMillsInPullQueue",
        "brokerFastFailureEnable",
        "osPageCacheBusyTimeOutMills",
        "useReentrantLockWhenPutMessage",
        "transientStorePoolEnable",
        # TLS: RocketMQ's self-signed test certificate, and the older name of need.client.auth.
        "tls.test.mode.enable",
        "tls.server.authClient",
        # Features CometMQ does not have.
        "clusterTopicEnable",
        "brokerTopicEnable",
        "fetchNamesrvAddrByAddressServer",
    }
)

# The keys UPDATE_BROKER_CONFIG may change (docs/operations.md, "Changing settings while a broker
# runs"): each is read where it is used, on every request or round, so a change applies at once (the
# broker itself applies autoCreateSubscriptionGroup, remakes TBW102 after an autoCreateTopicEnable or
# defaultTopicQueueNums change, and registers again after a brokerPermission change). The others are
# read once at start, or make the store's layout, ports and files: they need a restart.
RUNTIME_KEYS: Final = frozenset(
    {
        "brokerPermission",
        "autoCreateTopicEnable",
        "autoCreateSubscriptionGroup",
        "defaultTopicQueueNums",
        "rejectTransactionMessage",
        "transactionTimeOut",
        "transactionCheckInterval",
        "transactionCheckMax",
        "timerWheelEnable",
        "timerMaxDelaySec",
        "enableMixedMessageType",
        "longPollingEnable",
        "shortPollingTimeMills",
        "enablePropertyFilter",
    }
)
# The file under <storePathRootDir>/config keeping the settings changed at run time, for the next start.
RUNTIME_SETTINGS_FILE: Final = "broker.properties"
# Settings GET_BROKER_CONFIG does not show: secrets, and the tls.* keys (given as a group).
_NOT_SHOWN = frozenset({"inner_client_credentials", "init_authentication_user", "tls"})

_KEY_OF_ATTRIBUTE = {f.name: key_of(f.name) for f in dataclasses.fields(BrokerConfig)}
_ATTRIBUTE_OF_KEY = {key: name for name, key in _KEY_OF_ATTRIBUTE.items()}
_ATTRIBUTE_OF_KEY["haSlaveFallbehindMax"] = "ha_max_gap_not_in_sync"  # RocketMQ 4.9's name
# RocketMQ 5's key, longer than the attribute's name.
_KEY_OF_ATTRIBUTE["inner_client_credentials"] = "innerClientAuthenticationCredentials"
_ATTRIBUTE_OF_KEY["innerClientAuthenticationCredentials"] = "inner_client_credentials"
del _ATTRIBUTE_OF_KEY["innerClientCredentials"]
del _ATTRIBUTE_OF_KEY["tls"]  # given by its tls.* keys
_SUGGESTIONS = sorted({*_ATTRIBUTE_OF_KEY, *ROCKETMQ_KEYS_NOT_USED, *TLS_KEYS})

# The store's name of a setting, where it is not the broker's: the store spells "commitlog" as one
# word and puts the unit in the name.
_STORE_NAMES = {
    "mapped_file_size_commit_log": "mapped_file_size_commitlog",
    "flush_interval_commit_log": "flush_interval_commitlog_ms",
    "flush_commit_log_least_pages": "flush_commitlog_least_pages",
    "sync_flush_timeout": "sync_flush_timeout_ms",
}
_STORE_FIELDS = {f.name for f in dataclasses.fields(StoreConfig)}
# Broker attribute → the store setting it gives its value to.
_STORE_SETTING_OF_ATTRIBUTE = {
    name: setting for name in _KEY_OF_ATTRIBUTE if (setting := _STORE_NAMES.get(name, name)) in _STORE_FIELDS
}


def _unknown_key_message(key: str, source: str) -> str:
    return _unknown_key(key, f" in {source}, ignored")


def _unknown_key(key: str, where: str = "") -> str:
    message = f"unknown key {key}{where}"
    closest = difflib.get_close_matches(key, _SUGGESTIONS, n=1)
    return f"{message} (did you mean {closest[0]}?)" if closest else message


def fixed_at_start(keys: Iterable[str]) -> str | None:
    """Why settings with these keys cannot change while the broker runs (the keys not in
    RUNTIME_KEYS, or keys the broker does not know at all), or None if they can."""
    fixed = sorted(key for key in keys if key not in RUNTIME_KEYS)
    if not fixed:
        return None
    known = _ATTRIBUTE_OF_KEY.keys() | ROCKETMQ_KEYS_NOT_USED | TLS_KEYS
    unknown = [key for key in fixed if key not in known]
    if unknown:
        return "; ".join(_unknown_key(key) for key in unknown)
    return (
        f"cannot change {', '.join(fixed)} while the broker runs: set it in the broker's configuration "
        f"and restart (keys that can change: {', '.join(sorted(RUNTIME_KEYS))})"
    )


def _text_of(value: Any) -> str:
    """A setting as Java writes it."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _credentials(key: str, value: Any) -> Credentials | None:
    """Credentials from their JSON (an empty value: none). The error names the key, never the value."""
    if value is None or isinstance(value, Credentials):
        return value
    text = str(value).strip()
    if not text:
        return None
    try:
        return Credentials.from_json(text)
    except ConfigError as exc:  # its message never holds the secret
        raise ConfigError(f"{key}: {exc}") from None


def _converted(key: str, value: Any, current: Any) -> Any:
    if key == "innerClientAuthenticationCredentials":
        return _credentials(key, value)
    return converted(key, value, current)
