"""MessagingService: each gRPC call of ``apache.rocketmq.v2.MessagingService`` to the part serving it, after
the access check of what it does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, TypeVar

from cometmq.auth import Need
from cometmq.proxy._access import PUB, PUB_OR_SUB, SUB, consuming, on_group, on_topic
from cometmq.proxy._context import ProxyContext
from cometmq.proxy._convert import Refusal, check_topic
from cometmq.proxy._pb import definition_pb2 as v2
from cometmq.proxy._pb import service_pb2 as pb
from cometmq.proxy._pb import service_pb2_grpc
from cometmq.proxy._producer import Producing
from cometmq.proxy._receive import Receiving
from cometmq.proxy._status import Context, ok, respond, status, unimplemented

# The most addresses a QueryRoute may name as the proxy's endpoints (a client names the one or few it
# was given).
MAX_ROUTE_ENDPOINTS: Final = 16

Request = TypeVar("Request")
Response = TypeVar("Response")
StreamResponse = TypeVar("StreamResponse", pb.ReceiveMessageResponse, pb.PullMessageResponse)


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    """Every call is a coroutine (or an async generator for the streaming ones): grpc.aio runs any other
    handler in a thread pool, away from the event loop the proxy's connections live in."""

    def __init__(self, proxy: ProxyContext) -> None:
        self._proxy = proxy
        self._producing = Producing(proxy.brokers, proxy.routes, proxy.clients)
        self._receiving = Receiving(proxy)

    async def close(self) -> None:
        """Stop what runs between calls (the renewal of push consumers' messages)."""
        await self._receiving.close()

    async def _checked(
        self,
        context: Context,
        needs: list[Need],
        serve: Callable[[Request, Context], Awaitable[Response]],
        request: Request,
    ) -> Response:
        self._proxy.authorizer.check(context, needs)
        return await serve(request, context)

    async def _checked_stream(
        self,
        context: Context,
        request: pb.ReceiveMessageRequest | pb.PullMessageRequest,
        response_type: Callable[..., StreamResponse],
        stream: AsyncIterator[StreamResponse],
    ) -> AsyncIterator[StreamResponse]:
        """*stream*'s answers once the caller may consume from the request's queue; else one status (the
        stream, an async generator not started yet, then never runs)."""
        try:
            self._proxy.authorizer.check(
                context, consuming(request.message_queue.topic.name, request.group.name)
            )
        except Refusal as refusal:
            yield response_type(status=status(refusal.code, refusal.message))
            return
        async for response in stream:
            yield response

    # routes, clients, sends ------------------------------------------------------------------

    async def QueryRoute(self, request: pb.QueryRouteRequest, context: Context) -> pb.QueryRouteResponse:
        needs = [on_topic(request.topic.name, PUB_OR_SUB)]
        return await respond(pb.QueryRouteResponse, self._checked(context, needs, self._query_route, request))

    async def _query_route(self, request: pb.QueryRouteRequest, context: Context) -> pb.QueryRouteResponse:
        check_topic(request.topic.name)
        if len(request.endpoints.addresses) > MAX_ROUTE_ENDPOINTS:
            # Each queue of the answer repeats them: a long list would make a huge answer.
            raise Refusal(
                v2.BAD_REQUEST,
                f"{len(request.endpoints.addresses)} endpoint addresses, over the max {MAX_ROUTE_ENDPOINTS}",
            )
        endpoints = request.endpoints if request.endpoints.addresses else self._own_endpoints()
        queues = await self._proxy.routes.queues(request.topic, endpoints)
        return pb.QueryRouteResponse(status=ok(), message_queues=queues)

    def _own_endpoints(self) -> v2.Endpoints:
        """The proxy's address, for a client that did not say which it used."""
        host, _, port = self._proxy.config.advertised_address.rpartition(":")
        scheme = v2.IPv4 if host.replace(".", "").isdigit() else v2.DOMAIN_NAME
        return v2.Endpoints(scheme=scheme, addresses=[v2.Address(host=host, port=int(port))])

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Context) -> pb.HeartbeatResponse:
        needs = [on_group(request.group.name, SUB)] if request.group.name else []
        serve = self._proxy.clients.heartbeat
        return await respond(pb.HeartbeatResponse, self._checked(context, needs, serve, request))

    async def NotifyClientTermination(
        self, request: pb.NotifyClientTerminationRequest, context: Context
    ) -> pb.NotifyClientTerminationResponse:
        needs = [on_group(request.group.name, SUB)] if request.group.name else []
        serve = self._proxy.clients.notify_client_termination
        return await respond(
            pb.NotifyClientTerminationResponse, self._checked(context, needs, serve, request)
        )

    async def Telemetry(self, requests: AsyncIterator[pb.TelemetryCommand], context: Context) -> None:
        await self._proxy.clients.telemetry(requests, context)

    async def SendMessage(self, request: pb.SendMessageRequest, context: Context) -> pb.SendMessageResponse:
        needs = [on_topic(request.messages[0].topic.name, PUB)] if request.messages else []
        serve = self._producing.send_message
        return await respond(pb.SendMessageResponse, self._checked(context, needs, serve, request))

    async def EndTransaction(
        self, request: pb.EndTransactionRequest, context: Context
    ) -> pb.EndTransactionResponse:
        needs = [on_topic(request.topic.name, PUB)]
        serve = self._producing.end_transaction
        return await respond(pb.EndTransactionResponse, self._checked(context, needs, serve, request))

    async def RecallMessage(
        self, request: pb.RecallMessageRequest, context: Context
    ) -> pb.RecallMessageResponse:
        await unimplemented(context, "RecallMessage")

    async def SyncLiteSubscription(
        self, request: pb.SyncLiteSubscriptionRequest, context: Context
    ) -> pb.SyncLiteSubscriptionResponse:
        await unimplemented(context, "SyncLiteSubscription")

    # the consuming calls: _receive.py --------------------------------------------------------

    async def QueryAssignment(
        self, request: pb.QueryAssignmentRequest, context: Context
    ) -> pb.QueryAssignmentResponse:
        needs = consuming(request.topic.name, request.group.name)
        serve = self._receiving.query_assignment
        return await respond(pb.QueryAssignmentResponse, self._checked(context, needs, serve, request))

    async def ReceiveMessage(
        self, request: pb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[pb.ReceiveMessageResponse]:
        stream = self._receiving.receive_message(request, context)
        async for response in self._checked_stream(context, request, pb.ReceiveMessageResponse, stream):
            yield response

    async def AckMessage(self, request: pb.AckMessageRequest, context: Context) -> pb.AckMessageResponse:
        needs = consuming(request.topic.name, request.group.name)
        serve = self._receiving.ack_message
        return await respond(pb.AckMessageResponse, self._checked(context, needs, serve, request))

    async def ChangeInvisibleDuration(
        self, request: pb.ChangeInvisibleDurationRequest, context: Context
    ) -> pb.ChangeInvisibleDurationResponse:
        needs = consuming(request.topic.name, request.group.name)
        serve = self._receiving.change_invisible_duration
        return await respond(
            pb.ChangeInvisibleDurationResponse, self._checked(context, needs, serve, request)
        )

    async def ForwardMessageToDeadLetterQueue(
        self, request: pb.ForwardMessageToDeadLetterQueueRequest, context: Context
    ) -> pb.ForwardMessageToDeadLetterQueueResponse:
        needs = consuming(request.topic.name, request.group.name)
        serve = self._receiving.forward_message_to_dead_letter_queue
        return await respond(
            pb.ForwardMessageToDeadLetterQueueResponse, self._checked(context, needs, serve, request)
        )

    async def PullMessage(
        self, request: pb.PullMessageRequest, context: Context
    ) -> AsyncIterator[pb.PullMessageResponse]:
        stream = self._receiving.pull_message(request, context)
        async for response in self._checked_stream(context, request, pb.PullMessageResponse, stream):
            yield response

    async def UpdateOffset(
        self, request: pb.UpdateOffsetRequest, context: Context
    ) -> pb.UpdateOffsetResponse:
        needs = consuming(request.message_queue.topic.name, request.group.name)
        serve = self._receiving.update_offset
        return await respond(pb.UpdateOffsetResponse, self._checked(context, needs, serve, request))

    async def GetOffset(self, request: pb.GetOffsetRequest, context: Context) -> pb.GetOffsetResponse:
        needs = consuming(request.message_queue.topic.name, request.group.name)
        serve = self._receiving.get_offset
        return await respond(pb.GetOffsetResponse, self._checked(context, needs, serve, request))

    async def QueryOffset(self, request: pb.QueryOffsetRequest, context: Context) -> pb.QueryOffsetResponse:
        needs = [on_topic(request.message_queue.topic.name, SUB)]
        serve = self._receiving.query_offset
        return await respond(pb.QueryOffsetResponse, self._checked(context, needs, serve, request))
