"""A call the proxy does not serve ends with gRPC's UNIMPLEMENTED and a message naming it."""

from __future__ import annotations

import grpc
import pytest

from cometmq.proxy import service_pb2 as pb
from cometmq.proxy import service_pb2_grpc


def test_recall_message_is_unimplemented_and_named(stub: service_pb2_grpc.MessagingServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        stub.RecallMessage(pb.RecallMessageRequest())
    assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert "RecallMessage" in raised.value.details()


def test_sync_lite_subscription_is_unimplemented_and_named(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        stub.SyncLiteSubscription(pb.SyncLiteSubscriptionRequest())
    assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert "SyncLiteSubscription" in raised.value.details()
