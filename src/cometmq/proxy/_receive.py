"""The proxy's consuming calls: assignments, receive (POP), ack, invisible time, dead letters, offsets."""

from __future__ import annotations

from collections.abc import AsyncIterator

from cometmq.proxy._context import ProxyContext
from cometmq.proxy._pb import service_pb2 as pb
from cometmq.proxy._status import Context, unimplemented


class Receiving:
    """Serves the consuming calls of MessagingService for the service in _service.py."""

    def __init__(self, proxy: ProxyContext) -> None:
        self._proxy = proxy

    async def query_assignment(
        self, request: pb.QueryAssignmentRequest, context: Context
    ) -> pb.QueryAssignmentResponse:
        await unimplemented(context, "QueryAssignment")

    async def receive_message(
        self, request: pb.ReceiveMessageRequest, context: Context
    ) -> AsyncIterator[pb.ReceiveMessageResponse]:
        await unimplemented(context, "ReceiveMessage")
        yield pb.ReceiveMessageResponse()

    async def ack_message(self, request: pb.AckMessageRequest, context: Context) -> pb.AckMessageResponse:
        await unimplemented(context, "AckMessage")

    async def change_invisible_duration(
        self, request: pb.ChangeInvisibleDurationRequest, context: Context
    ) -> pb.ChangeInvisibleDurationResponse:
        await unimplemented(context, "ChangeInvisibleDuration")

    async def forward_message_to_dead_letter_queue(
        self, request: pb.ForwardMessageToDeadLetterQueueRequest, context: Context
    ) -> pb.ForwardMessageToDeadLetterQueueResponse:
        await unimplemented(context, "ForwardMessageToDeadLetterQueue")

    async def pull_message(
        self, request: pb.PullMessageRequest, context: Context
    ) -> AsyncIterator[pb.PullMessageResponse]:
        await unimplemented(context, "PullMessage")
        yield pb.PullMessageResponse()

    async def update_offset(
        self, request: pb.UpdateOffsetRequest, context: Context
    ) -> pb.UpdateOffsetResponse:
        await unimplemented(context, "UpdateOffset")

    async def get_offset(self, request: pb.GetOffsetRequest, context: Context) -> pb.GetOffsetResponse:
        await unimplemented(context, "GetOffset")

    async def query_offset(self, request: pb.QueryOffsetRequest, context: Context) -> pb.QueryOffsetResponse:
        await unimplemented(context, "QueryOffset")
