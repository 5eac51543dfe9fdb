"""Access control of the 5.x clients' calls: who signed a call, and whether that user may do what it does.

A 5.x client signs every call with gRPC metadata: ``authorization`` (``MQv2-HMAC-SHA1
Credential=<AccessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>``) and the ``x-mq-date-time`` it
signed. The proxy checks it against the users and ACLs of the servers it runs beside (a standalone's,
while ``aclEnable`` is on), needing what RocketMQ 5 needs of the same operation: Pub on a topic to send
to it, Sub on a topic and on a group to consume, either to look up a route.
"""

from __future__ import annotations

import re
from typing import Final

from cometmq.auth import AccessControl, Action, Need, Resource, ResourceType
from cometmq.proxy._convert import Refusal
from cometmq.proxy._pb import definition_pb2 as v2
from cometmq.proxy._status import Context, peer_address

AUTHORIZATION_KEY: Final = "authorization"
DATE_TIME_KEY: Final = "x-mq-date-time"
_AUTHORIZATION = re.compile(r"\S+\s+Credential=([^,\s]+),\s*SignedHeaders=[^,]*,\s*Signature=(\S+)")

PUB: Final = (Action.PUB,)
SUB: Final = (Action.SUB,)
PUB_OR_SUB: Final = (Action.PUB, Action.SUB)


def on_topic(name: str, actions: tuple[Action, ...]) -> Need:
    return Need.of(Resource.of(ResourceType.TOPIC, name), actions)


def on_group(name: str, actions: tuple[Action, ...]) -> Need:
    return Need.of(Resource.of(ResourceType.GROUP, name), actions)


def consuming(topic: str, group: str) -> list[Need]:
    """What a consuming call on *topic* for *group* needs."""
    return [on_topic(topic, SUB), on_group(group, SUB)]


class Authorizer:
    """Checks calls against *access* (None: access control is off, every call passes)."""

    def __init__(self, access: AccessControl | None) -> None:
        self._access = access

    def check(self, context: Context, needs: list[Need]) -> None:
        """UNAUTHORIZED (RocketMQ's proxy answers both failures so) when the call is not signed by a
        known user, or that user may not have *needs*."""
        if self._access is None:
            return
        metadata = {key: str(value) for key, value in context.invocation_metadata() or ()}
        signed = _AUTHORIZATION.match(metadata.get(AUTHORIZATION_KEY, ""))
        date_time = metadata.get(DATE_TIME_KEY, "")
        if signed is None or not date_time:
            raise Refusal(
                v2.UNAUTHORIZED,
                "the call is not signed: this server requires an access key and secret key (aclEnable=true)",
            )
        access_key, signature = signed.groups()
        refused = self._access.verify_grpc(peer_address(context), access_key, date_time, signature, needs)
        if refused is not None:
            raise Refusal(v2.UNAUTHORIZED, refused)
