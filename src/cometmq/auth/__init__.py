"""Access control: request signatures, users and ACLs (RocketMQ 5's ACL 2.0), 4.x plain_acl.yml
accounts, and the one table of what each request needs.

Pure but for file I/O in :class:`AuthStore` (``auth.json``) and the plain ACL file's loader: no
sockets. A server puts :meth:`AccessControl.check` in front of its dispatcher and mounts
:func:`auth_admin_handlers`; a client signs its requests with :func:`sign`.
"""

from cometmq.auth._access import AccessControl
from cometmq.auth._admin import auth_admin_handlers
from cometmq.auth._model import (
    Acl,
    Action,
    Decision,
    Need,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    ResourcePattern,
    ResourceType,
    User,
    UserStatus,
    UserType,
)
from cometmq.auth._needs import needs_of
from cometmq.auth._signature import (
    ACCESS_KEY,
    REQUEST_CODE,
    SECURITY_TOKEN,
    SIGNATURE,
    Credentials,
    sign,
    signature_of,
)
from cometmq.auth._store import AuthStore
from cometmq.errors import AuthError

__all__ = [
    "ACCESS_KEY",
    "REQUEST_CODE",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "AccessControl",
    "Acl",
    "Action",
    "AuthError",
    "AuthStore",
    "Credentials",
    "Decision",
    "Need",
    "Policy",
    "PolicyEntry",
    "PolicyType",
    "Resource",
    "ResourcePattern",
    "ResourceType",
    "User",
    "UserStatus",
    "UserType",
    "auth_admin_handlers",
    "needs_of",
    "sign",
    "signature_of",
]
