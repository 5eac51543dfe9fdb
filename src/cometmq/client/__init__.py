"""Clients of a CometMQ (or RocketMQ) cluster."""

from cometmq.client.admin import AdminClient

__all__ = ["AdminClient"]
