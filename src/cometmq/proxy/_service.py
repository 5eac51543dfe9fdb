"""MessagingService: each gRPC call of ``apache.rocketmq.v2.MessagingService`` to the part serving it."""

from __future__ import annotations

from collections.abc import AsyncIterator

from cometmq.proxy._context import ProxyContext
from cometmq.proxy._convert import check_topic
from cometmq.proxy._pb import definition_pb2 as v2
from cometmq.proxy._pb import service_pb2 as pb
from cometmq.proxy._pb import service_pb2_grpc
from cometmq.proxy._producer import Producing
from cometmq.proxy._receive import Receiving
from cometmq.proxy._status import Context, ok, respond, unimplemented


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    """Every call is a coroutine (or an async generator for the streaming ones): grpc.aio runs any other
    handler in a thread pool, away from the event loop the proxy's connections live in."""

    def __init__(self, proxy: ProxyContext) -> None:
        self._proxy = proxy
        self._producing = Producing(proxy.brokers, proxy.routes, proxy.clients)
        self._receiving = Receiving(proxy)

    async def QueryRoute(self, request: pb.QueryRouteRequest, context: Context) -> pb.QueryRouteResponse:
        return await respond(pb.QueryRouteResponse, self._query_route(request, context))

    async def _query_route(self, request: pb.QueryRouteRequest, context: Context) -> pb.QueryRouteResponse:
        check_topic(request.topic.name)
        endpoints = request.endpoints if request.endpoints.addresses else self._own_endpoints()
        queues = await self._proxy.routes.queues(request.topic, endpoints)
        return pb.QueryRouteResponse(status=ok(), message_queues=queues)

    def _own_endpoints(self) -> v2.Endpoints:
        """The proxy's address, for a client that did not say which it used."""
        host, _, port = self._proxy.config.advertised_address.rpartition(":")
        scheme = v2.IPv4 if host.replace(".", "").isdigit() else v2.DOMAIN_NAME
        return v2.Endpoints(scheme=scheme, addresses=[v2.Address(host=host, port=int(port))])

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Context) -> pb.HeartbeatResponse:
        return await respond(pb.HeartbeatResponse, self._proxy.clients.heartbeat(request, context))

    async def SendMessage(self, request: pb.SendMessageRequest, context: Context) -> pb.SendMessageResponse:
        return await respond(pb.SendMessageResponse, self._producing.send_message(request, context))

    async def EndTransaction(
        self, request: pb.EndTransactionRequest, context: Context
    ) -> pb.EndTransactionResponse:
        return await respond(pb.EndTransactionResponse, self._producing.end_transaction(request, context))

    async def Telemetry(self, requests: AsyncIterator[pb.TelemetryCommand], context: Context) -> None:
        await self._proxy.clients.telemetry(requests, context, self._producing.on_settings)

    async def NotifyClientTermination(
        self, request: pb.NotifyClientTerminationRequest, context: Context
    ) -> pb.NotifyClientTerminationResponse:
        return await respond(
            pb.NotifyClientTerminationResponse,
            self._proxy.clients.notify_client_termination(request, context),
        )

    async def RecallMessage(
        self, request: pb.RecallMessageRequest, context: Context
    ) -> pb.RecallMessageResponse:
        await unimplemented(context, "RecallMessage")

    async def SyncLiteSubscription(
        self, request: pb.SyncLiteSubscriptionRequest, context: Context
    ) -> pb.SyncLiteSubscriptionResponse:
        await unimplemented(context, "SyncLiteSubscription")

    # The consuming calls: _receive.py.

    async def QueryAssignment(
        self, request: pb.QueryAssignmentRequest, context: Context
    ) -> pb.QueryAssignmentResponse:
        return await self._receiving.query_assignment(request, context)

    async def ReceiveMessage(
        self, request: pb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[pb.ReceiveMessageResponse]:
        async for response in self._receiving.receive_message(request, context):
            yield response

    async def AckMessage(self, request: pb.AckMessageRequest, context: Context) -> pb.AckMessageResponse:
        return await self._receiving.ack_message(request, context)

    async def ChangeInvisibleDuration(
        self, request: pb.ChangeInvisibleDurationRequest, context: Context
    ) -> pb.ChangeInvisibleDurationResponse:
        return await self._receiving.change_invisible_duration(request, context)

    async def ForwardMessageToDeadLetterQueue(
        self, request: pb.ForwardMessageToDeadLetterQueueRequest, context: Context
    ) -> pb.ForwardMessageToDeadLetterQueueResponse:
        return await self._receiving.forward_message_to_dead_letter_queue(request, context)

    async def PullMessage(
        self, request: pb.PullMessageRequest, context: Context
    ) -> AsyncIterator[pb.PullMessageResponse]:
        async for response in self._receiving.pull_message(request, context):
            yield response

    async def UpdateOffset(
        self, request: pb.UpdateOffsetRequest, context: Context
    ) -> pb.UpdateOffsetResponse:
        return await self._receiving.update_offset(request, context)

    async def GetOffset(self, request: pb.GetOffsetRequest, context: Context) -> pb.GetOffsetResponse:
        return await self._receiving.get_offset(request, context)

    async def QueryOffset(self, request: pb.QueryOffsetRequest, context: Context) -> pb.QueryOffsetResponse:
        return await self._receiving.query_offset(request, context)
