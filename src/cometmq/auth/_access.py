"""The gate in front of a server's dispatcher: who signed a request, and may they do what it asks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cometmq.auth._model import Need
from cometmq.auth._store import AuthStore
from cometmq.protocol.command import RemotingCommand


class AccessControl:
    """Authenticates and authorizes requests against the users and ACLs of *store* and the accounts
    of a 4.x *plain_acl_file*. *cluster* is the broker's cluster name, None at a name server."""

    def __init__(self, store: AuthStore, cluster: str | None, plain_acl_file: Path | None = None) -> None:
        self.store = store
        self.cluster = cluster
        self.plain_acl_file = plain_acl_file
        raise NotImplementedError

    def has_users(self) -> bool:
        """Whether any request could ever be authenticated: a stored user or a plain account."""
        raise NotImplementedError

    def check(self, remote_address: str, request: RemotingCommand) -> RemotingCommand | None:
        """None if *request* from *remote_address* (``host:port``) may be served, else the NO_PERMISSION
        response to send."""
        raise NotImplementedError

    def verify_peer(
        self, remote_address: str, access_key: str, content: bytes, signature: bytes, needs: Sequence[Need]
    ) -> str | None:
        """None if user *access_key* exists, is enabled, *signature* is the raw HMAC-SHA1 of *content*
        under its secret and it is allowed *needs*; else why not (the HA link's AUTH)."""
        raise NotImplementedError

    def reload_if_changed(self) -> None:
        """Re-read the plain ACL file if its modification time or size changed."""
        raise NotImplementedError
