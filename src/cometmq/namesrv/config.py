"""Name server configuration under RocketMQ's key names (``cometmq namesrv -c FILE``): the access-control
keys a broker reads too, and the few server settings a name server has."""

from __future__ import annotations

import dataclasses
import difflib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cometmq.auth.serving import AclSettings
from cometmq.errors import ConfigError
from cometmq.javaprops import apply_properties, key_of, read_properties
from cometmq.metrics import DEFAULT_PROM_EXPORTER_PORT, MetricsExporterType
from cometmq.remoting import ServerLimits, default_max_connections
from cometmq.remoting.tls import TLS_KEYS, TlsSettings

log = logging.getLogger("cometmq.namesrv")

# Where a name server keeps its users and ACLs unless authConfigPath (or --data-dir) says otherwise.
DEFAULT_NAMESRV_DIR = Path.home() / ".cometmq" / "namesrv"


@dataclass(slots=True)
class NamesrvConfig:
    """Every setting ``cometmq namesrv`` reads from its file. Attribute ``listen_port`` is key
    ``listenPort``; the access-control keys mean what they mean in a broker.conf (docs/security.md)."""

    listen_port: int = 9876
    order_message_enable: bool = False
    server_channel_max_idle_time_seconds: float = 120.0
    server_max_connections: int = field(default_factory=default_max_connections)
    acl_enable: bool = False
    plain_acl_file: str = ""
    auth_config_path: str = field(default_factory=lambda: str(DEFAULT_NAMESRV_DIR))
    # Raw JSON {"username": .., "password": ..}: kept out of the repr, it holds a password.
    init_authentication_user: str = field(default="", repr=False)
    # RocketMQ's tls.* keys (cometmq.remoting.tls), the ones of one source taken together.
    tls: TlsSettings = field(default_factory=TlsSettings)
    # Prometheus metrics (docs/metrics.md), as a broker's: PROM serves /metrics on
    # metricsPromExporterHost (empty: the host the name server listens on) : metricsPromExporterPort.
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: int = DEFAULT_PROM_EXPORTER_PORT

    def update(self, values: Mapping[str, Any], source: str = "the name server settings") -> None:
        """Apply settings given by RocketMQ key or attribute name; a key it does not know is ignored
        with a warning naming the closest known key (as a broker does), a value that cannot be
        converted raises ConfigError naming the key."""
        self.tls = self.tls.updated(values)
        for key in apply_properties(self, values, _KEY_OF_ATTRIBUTE, _ATTRIBUTE_OF_KEY, skip=TLS_KEYS):
            if key not in ROCKETMQ_NAMESRV_KEYS_NOT_USED:
                closest = difflib.get_close_matches(key, list(_ATTRIBUTE_OF_KEY), n=1)
                hint = f" (did you mean {closest[0]}?)" if closest else ""
                log.warning("unknown key %s in %s, ignored%s", key, source, hint)
        for key, port in (
            ("listenPort", self.listen_port),
            ("metricsPromExporterPort", self.metrics_prom_exporter_port),
        ):
            if not 0 <= port <= 65535:
                raise ConfigError(f"{key} {port} is not a port number")
        if self.server_channel_max_idle_time_seconds < 0:
            raise ConfigError("serverChannelMaxIdleTimeSeconds (--channel-max-idle) must be 0 or more")
        if self.server_max_connections < 1:
            raise ConfigError("serverMaxConnections (--max-connections) must be 1 or more")

    @classmethod
    def from_file(cls, path: str | Path) -> NamesrvConfig:
        """A config from a properties file (a RocketMQ ``namesrv.conf``)."""
        try:
            values = read_properties(path)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        config = cls()
        config.update(values, source=str(path))
        return config

    def acl_settings(self) -> AclSettings:
        return AclSettings(
            enabled=self.acl_enable,
            plain_acl_file=self.plain_acl_file,
            auth_config_path=Path(self.auth_config_path).expanduser(),
            init_authentication_user=self.init_authentication_user,
        )

    def server_limits(self) -> ServerLimits:
        return ServerLimits(
            channel_max_idle_s=self.server_channel_max_idle_time_seconds,
            max_connections=self.server_max_connections,
        )


# Keys a RocketMQ namesrv.conf (or a broker.conf shared with the name server) may carry that the name
# server has no use for: ignored without a warning.
ROCKETMQ_NAMESRV_KEYS_NOT_USED = frozenset(
    {
        "rocketmqHome",
        "kvConfigPath",
        "configStorePath",
        "productEnvName",
        "clusterTest",
        "serverWorkerThreads",
        "serverSelectorThreads",
        "defaultThreadPoolNums",
        "innerClientAuthenticationCredentials",  # a broker's: the name server sends no requests
        "tls.test.mode.enable",
        "tls.server.authClient",
    }
)

_KEY_OF_ATTRIBUTE = {f.name: key_of(f.name) for f in dataclasses.fields(NamesrvConfig)}
_ATTRIBUTE_OF_KEY = {key: name for name, key in _KEY_OF_ATTRIBUTE.items()}
del _ATTRIBUTE_OF_KEY["tls"]  # given by its tls.* keys
