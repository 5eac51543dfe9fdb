"""AdminClient: cluster and topic administration against a NameServer and its brokers (asyncio)."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

from cometmq.common.naming import DEFAULT_TOPIC, PERM_READ, PERM_WRITE, topic_name_error
from cometmq.common.route import BrokerData, ClusterInfo, TopicList, TopicRouteData, parse_kv_table
from cometmq.errors import BrokerError, CometMQError, ConnectionClosedError
from cometmq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger("cometmq.client")


class AdminClient:
    """Talks to the NameServer(s) at ``namesrv_addr`` (``host:port``, or several joined by ``;`` as
    RocketMQ's ``namesrvAddr`` allows) and to the brokers they list.

    Every non-success answer raises :class:`BrokerError` with the server's code and remark.
    """

    def __init__(self, namesrv_addr: str, timeout: float = 5.0, connect_timeout: float = 3.0) -> None:
        self.namesrv_addrs = [addr.strip() for addr in namesrv_addr.split(";") if addr.strip()]
        if not self.namesrv_addrs:
            raise CometMQError("no name server address given")
        self.timeout = timeout
        self._remoting = RemotingClient(connect_timeout=connect_timeout)

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._remoting.close()

    # plumbing ----------------------------------------------------------------------------------

    async def _invoke(
        self, addr: str, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        request = RemotingCommand(code=code, ext_fields=ext_fields or {}, body=body)
        response = await self._remoting.invoke(addr, request, self.timeout)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark)
        return response

    async def _invoke_namesrv(self, code: int, ext_fields: dict[str, str] | None = None) -> RemotingCommand:
        """Ask the first name server that can be reached; a server's error answer is final."""
        last_error: ConnectionClosedError | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self._invoke(addr, code, ext_fields)
            except ConnectionClosedError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    # name server queries -----------------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        response = await self._invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        return ClusterInfo.decode(response.body)

    async def topic_list(self) -> list[str]:
        response = await self._invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return sorted(TopicList.decode(response.body).topics)

    async def topic_route(self, topic: str) -> TopicRouteData:
        # Ask for standard JSON explicitly, so an older name server does not send the legacy form.
        response = await self._invoke_namesrv(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": "true"}
        )
        return TopicRouteData.decode(response.body)

    # topics ------------------------------------------------------------------------------------

    async def masters_of(self, cluster: str | None = None) -> tuple[str, list[BrokerData]]:
        """The cluster meant (the only one, when ``cluster`` is None) and its master brokers."""
        info = await self.cluster_info()
        if not info.cluster_addr_table:
            raise CometMQError(
                f"no broker is registered with the name server at {';'.join(self.namesrv_addrs)}"
            )
        if cluster is None:
            if len(info.cluster_addr_table) > 1:
                names = ", ".join(sorted(info.cluster_addr_table))
                raise CometMQError(f"several clusters are registered ({names}); say which one")
            cluster = next(iter(info.cluster_addr_table))
        elif cluster not in info.cluster_addr_table:
            raise CometMQError(
                f"cluster {cluster!r} is unknown to the name server"
                f" (known: {', '.join(sorted(info.cluster_addr_table))})"
            )
        masters = [broker for broker in info.brokers_of(cluster) if broker.master_addr is not None]
        if not masters:
            raise CometMQError(f"cluster {cluster!r} has no master broker")
        return cluster, masters

    async def create_topic(
        self,
        topic: str,
        queues: int = 8,
        cluster: str | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        wait: bool = True,
    ) -> list[BrokerData]:
        """Create (or update) ``topic`` with ``queues`` read and write queues on every master of the
        cluster, and (``wait``) until the name server routes it there; returns those brokers."""
        reason = topic_name_error(topic)
        if reason is not None:
            raise CometMQError(f'topic "{topic}" is illegal: {reason}')
        if queues < 1:
            raise CometMQError(f"a topic needs at least one queue, not {queues}")
        _, masters = await self.masters_of(cluster)
        header = {
            "topic": topic,
            "defaultTopic": DEFAULT_TOPIC,
            "readQueueNums": str(queues),
            "writeQueueNums": str(queues),
            "perm": str(perm),
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "true" if order else "false",
        }
        for broker in masters:
            assert broker.master_addr is not None
            await self._invoke(broker.master_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        if wait:
            await self._await_route(topic, masters, queues)
        return masters

    async def _await_route(self, topic: str, brokers: list[BrokerData], queues: int) -> None:
        """Wait (at most the request timeout) until the name server routes ``topic`` to ``brokers``.

        A broker re-registers its topics after creating one, a Java broker before it replies and
        ours just after; waiting here means the topic is usable as soon as create_topic returns.
        """
        wanted = {broker.broker_name for broker in brokers}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            try:
                route = await self.topic_route(topic)
            except BrokerError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
            else:
                routed = {q.broker_name for q in route.queue_datas if q.write_queue_nums == queues}
                if wanted <= routed:
                    return
            if loop.time() >= deadline:
                log.warning("topic %s created, but the name server does not route it yet", topic)
                return
            await asyncio.sleep(0.05)

    async def delete_topic(self, topic: str, cluster: str | None = None) -> list[BrokerData]:
        """Delete ``topic`` on every master of the cluster, then from the name servers."""
        cluster, masters = await self.masters_of(cluster)
        for broker in masters:
            assert broker.master_addr is not None
            await self._invoke(broker.master_addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        # Every name server keeps its own table, so each one must forget the topic.
        for addr in self.namesrv_addrs:
            await self._invoke(
                addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster}
            )
        return masters

    # brokers -----------------------------------------------------------------------------------

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """The broker's runtime statistics (brokerVersionDesc, putTps, …) as strings."""
        response = await self._invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return parse_kv_table(response.body)
