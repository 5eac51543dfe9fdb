"""A standalone server with its RocketMQ 5 proxy, gRPC stubs to it, and the messages 5.x clients send;
conftest.py has the fixtures that start them."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path

from cometmq.auth import Credentials
from cometmq.client import blocking
from cometmq.proxy import definition_pb2 as v2
from cometmq.proxy import service_pb2 as pb
from cometmq.proxy import service_pb2_grpc
from processes import ServerProcess, broker_address, proxy_address, proxy_args, start_standalone

Stub = service_pb2_grpc.MessagingServiceStub

_names = itertools.count()


@dataclass
class ProxiedStandalone:
    process: ServerProcess
    namesrv: str
    proxy: str

    def new_topic(self, attributes: str | None = None, queues: int = 4) -> str:
        """A topic of its own for a test (``attributes``: RocketMQ 5's ``+name=value`` changes)."""
        topic = f"proxy-topic-{os.getpid()}-{next(_names)}"
        with blocking.AdminClient(self.namesrv) as admin:
            if attributes and "message.type=MIXED" in attributes:
                # A broker takes MIXED only with enableMixedMessageType (off by default, as RocketMQ's).
                admin.update_broker_config(broker_address(self.process), {"enableMixedMessageType": "true"})
            admin.create_topic(topic, queues, attributes=attributes)
        return topic


def start_proxied(directory: Path, conf: Path | None = None) -> ProxiedStandalone:
    process, namesrv = start_standalone(directory, conf, *proxy_args())
    return ProxiedStandalone(process, namesrv, proxy_address(process))


def client_metadata(client_id: str) -> list[tuple[str, str]]:
    """The gRPC metadata a 5.x client sends with every call (its id is what the proxy needs)."""
    return [("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2")]


def new_client_id() -> str:
    return f"test-client-{os.getpid()}-{next(_names)}"


def signed(credentials: Credentials | None, secret: str | None = None) -> list[tuple[str, str]]:
    """A 5.x client's metadata, signed as *credentials* (with *secret* in place of its secret key)."""
    metadata = client_metadata(new_client_id())
    if credentials is None:
        return metadata
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    key = (secret or credentials.secret_key).encode()
    signature = hmac.new(key, date_time.encode(), hashlib.sha1).hexdigest()
    authorization = (
        f"MQv2-HMAC-SHA1 Credential={credentials.access_key}, SignedHeaders=x-mq-date-time, "
        f"Signature={signature}"
    )
    return [*metadata, ("x-mq-date-time", date_time), ("authorization", authorization)]


def message(topic: str, body: bytes = b"hello", **system: object) -> v2.Message:
    """A v2.Message as a 5.x producer sends it: an id of its own, born now, the given system properties."""
    properties = v2.SystemProperties(message_id=f"{os.getpid():08X}{next(_names):024X}", **system)  # type: ignore[arg-type]
    properties.born_timestamp.FromMilliseconds(int(time.time() * 1000))
    if "message_type" not in system:
        properties.message_type = v2.NORMAL
    return v2.Message(topic=v2.Resource(name=topic), body=body, system_properties=properties)


def producer_settings(*topics: str) -> pb.TelemetryCommand:
    settings = v2.Settings(
        client_type=v2.PRODUCER,
        publishing=v2.Publishing(
            topics=[v2.Resource(name=topic) for topic in topics], validate_message_type=True
        ),
    )
    return pb.TelemetryCommand(settings=settings)


def consumer_settings(group: str, *topics: str, client_type: int = v2.SIMPLE_CONSUMER) -> pb.TelemetryCommand:
    entries = [
        v2.SubscriptionEntry(
            topic=v2.Resource(name=topic), expression=v2.FilterExpression(type=v2.TAG, expression="*")
        )
        for topic in topics
    ]
    settings = v2.Settings(
        client_type=client_type,  # type: ignore[arg-type]
        subscription=v2.Subscription(group=v2.Resource(name=group), subscriptions=entries),
    )
    return pb.TelemetryCommand(settings=settings)
