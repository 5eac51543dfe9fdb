"""The headers of RocketMQ 5's user and ACL requests (AUTH_CREATE_USER 3001 … AUTH_LIST_ACL 3010),
declared once for both ends (:mod:`cometmq.protocol.headers`). Every field is a nullable Java String
with no check at decoding, as RocketMQ's: a blank name is the handler's to refuse (INVALID_PARAMETER).
Bodies are JSON: a UserInfo or an AclInfo (:mod:`cometmq.auth`), list answers JSON arrays of them.
"""

from __future__ import annotations

from cometmq.protocol.headers import Header, JavaString, header, wire


@header
class UserRequestHeader(Header):
    """AUTH_CREATE_USER, AUTH_UPDATE_USER, AUTH_DELETE_USER and AUTH_GET_USER (RocketMQ's
    Create/Update/Delete/GetUserRequestHeader)."""

    username: JavaString | None = wire("username", default=None)


@header
class ListUsersRequestHeader(Header):
    """AUTH_LIST_USER: the users whose name contains *filter* (all if None)."""

    filter: JavaString | None = wire("filter", default=None)


@header
class AclRequestHeader(Header):
    """AUTH_CREATE_ACL, AUTH_UPDATE_ACL and AUTH_GET_ACL: the subject, ``User:<name>``."""

    subject: JavaString | None = wire("subject", default=None)


@header
class DeleteAclRequestHeader(Header):
    """AUTH_DELETE_ACL: the subject's whole ACL, or only its entries on *resource* (of the policy
    *policy_type*, Custom if None)."""

    subject: JavaString | None = wire("subject", default=None)
    policy_type: JavaString | None = wire("policyType", default=None)
    resource: JavaString | None = wire("resource", default=None)


@header
class ListAclsRequestHeader(Header):
    """AUTH_LIST_ACL: the ACLs whose subject contains *subject_filter* and that have an entry whose
    resource key contains *resource_filter* (None: no condition)."""

    subject_filter: JavaString | None = wire("subjectFilter", default=None)
    resource_filter: JavaString | None = wire("resourceFilter", default=None)
