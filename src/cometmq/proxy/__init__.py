"""The RocketMQ 5 gRPC proxy: ``apache.rocketmq.v2.MessagingService`` in front of CometMQ brokers.

RocketMQ 5's clients (Java, Go, C#, C++, Rust, Node.js, Python) speak gRPC to a proxy, which reaches the
brokers as a 4.x client does: routes from the name servers, remoting requests to the broker a call names.
:class:`ProxyServer` serves it in the event loop of the process it runs in (``cometmq proxy`` in front of a
cluster, or inside ``cometmq standalone``). The generated protobuf modules are re-exported for tests and
tools that speak to it.
"""

from cometmq.proxy._config import DEFAULT_PROXY_PORT, ProxyConfig
from cometmq.proxy._pb import definition_pb2, service_pb2, service_pb2_grpc
from cometmq.proxy._server import ProxyServer

__all__ = [
    "DEFAULT_PROXY_PORT",
    "ProxyConfig",
    "ProxyServer",
    "definition_pb2",
    "service_pb2",
    "service_pb2_grpc",
]
