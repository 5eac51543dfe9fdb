"""The handlers of AUTH_CREATE_USER … AUTH_LIST_ACL (3001-3010), the same on brokers and name servers."""

from __future__ import annotations

from cometmq.auth._access import AccessControl
from cometmq.auth._store import AuthStore
from cometmq.remoting import RequestHandler


def auth_admin_handlers(store: AuthStore, access: AccessControl) -> dict[int, RequestHandler]:
    """A dispatch table entry for each of the codes 3001-3010."""
    raise NotImplementedError
