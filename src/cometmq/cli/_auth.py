"""``cometmq user …`` and ``cometmq acl …``: the users and ACLs of servers with aclEnable (RocketMQ 5's
ACL 2.0; mqadmin's createUser … listAcl).

Every broker and every name server keeps its own users and ACLs, so a change goes by default to each
broker the name servers list and to the name servers themselves (``--addr`` picks servers instead);
the command prints one line per server, and fails when any of them refused."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cometmq.auth import (
    Acl,
    Action,
    AuthError,
    Decision,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    User,
    UserStatus,
    UserType,
)
from cometmq.cli._admin import add_admin_command, print_json
from cometmq.client import AdminClient
from cometmq.console import counted, format_table
from cometmq.errors import BrokerError, CometMQError, OptionError

if TYPE_CHECKING:
    from typing import TypeAlias

    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

T = TypeVar("T")

_TARGETS = (
    "Sent to every broker the name servers list and to the name servers (each keeps its own), unless "
    "--addr names servers."
)


def add_auth_commands(commands: Subcommands) -> None:
    _add_user_commands(commands)
    _add_acl_commands(commands)


# the options --------------------------------------------------------------------------------------


def _enum_option(enum_type: Any, what: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return enum_type.parse(text, what)
        except AuthError as exc:
            raise argparse.ArgumentTypeError(exc.remark) from None

    return parse


def _list_option(parse_one: Callable[[str], T]) -> Callable[[str], list[T]]:
    def parse(text: str) -> list[T]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError("give at least one, separated by commas")
        return [parse_one(item) for item in items]

    return parse


def _resource(text: str) -> Resource:
    try:
        return Resource.parse(text)
    except AuthError as exc:
        raise argparse.ArgumentTypeError(exc.remark) from None


def _subject(text: str) -> str:
    kind, colon, name = text.partition(":")
    if not colon or kind.strip().lower() != "user" or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not a subject: give User:<name>")
    return f"User:{name.strip()}"


def _add_command(
    commands: Subcommands,
    name: str,
    action: Callable[[AdminClient, argparse.Namespace], Awaitable[None]],
    help: str,
) -> argparse.ArgumentParser:
    parser = add_admin_command(
        commands, name, action, help=help, description=f"{help[0].upper()}{help[1:]}. {_TARGETS}"
    )
    parser.add_argument(
        "--addr",
        action="append",
        metavar="HOST:PORT",
        help="a server to send it to (a broker's client port or a name server); repeat for several",
    )
    return parser


def _add_user_commands(commands: Subcommands) -> None:
    user = commands.add_parser(
        "user",
        help="create, change, show and delete the users of servers with aclEnable",
        description=f"Manage the users of servers with aclEnable (RocketMQ 5's ACL 2.0). {_TARGETS}",
    )
    user_commands = user.add_subparsers(dest="user_command", metavar="COMMAND", required=True)

    def username(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-u", "--username", required=True, metavar="NAME")

    def password(parser: argparse.ArgumentParser, required: bool) -> None:
        parser.add_argument(
            "-p",
            "--password",
            required=required,
            metavar="PASSWORD",
            help="the user's password (its secret key); '-' reads it from the first line of stdin, "
            "which keeps it out of the process list and the shell history",
        )

    create = _add_command(user_commands, "create", _user_create, "create a user")
    username(create)
    password(create, required=True)
    create.add_argument(
        "--user-type",
        type=_enum_option(UserType, "user type"),
        default=UserType.NORMAL,
        metavar="Super|Normal",
        help="a Super user may do anything (default: Normal)",
    )
    create.add_argument(
        "--user-status",
        type=_enum_option(UserStatus, "user status"),
        default=UserStatus.ENABLE,
        metavar="enable|disable",
        help="a disabled user is refused everything (default: enable)",
    )

    update = _add_command(user_commands, "update", _user_update, "change a user's password, type or status")
    username(update)
    password(update, required=False)
    update.add_argument("--user-type", type=_enum_option(UserType, "user type"), metavar="Super|Normal")
    update.add_argument(
        "--user-status", type=_enum_option(UserStatus, "user status"), metavar="enable|disable"
    )

    delete = _add_command(user_commands, "delete", _user_delete, "delete a user")
    username(delete)

    get = _add_command(user_commands, "get", _user_get, "show a user (never its password)")
    username(get)

    listing = _add_command(user_commands, "list", _user_list, "list the users (never their passwords)")
    listing.add_argument("--filter", metavar="TEXT", help="only the users whose name contains TEXT")


def _add_acl_commands(commands: Subcommands) -> None:
    acl = commands.add_parser(
        "acl",
        help="grant, change, show and revoke what users may do on servers with aclEnable",
        description=(
            "Manage the ACLs of servers with aclEnable (RocketMQ 5's ACL 2.0): per subject (User:NAME), "
            "entries that allow or deny actions (Pub, Sub, Create, Update, Delete, Get, List, All) on "
            "resources (Topic:NAME, Topic:PREFIX*, Topic:*, Group:…, Cluster:…, *), from source IPs. "
            f"{_TARGETS}"
        ),
    )
    acl_commands = acl.add_subparsers(dest="acl_command", metavar="COMMAND", required=True)

    def subject(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-s", "--subject", required=True, type=_subject, metavar="User:NAME")

    def entries(parser: argparse.ArgumentParser) -> None:
        subject(parser)
        parser.add_argument(
            "-r",
            "--resources",
            required=True,
            type=_list_option(_resource),
            metavar="RESOURCE,…",
            help="Topic:NAME, Topic:PREFIX*, Topic:*, Group:…, Cluster:… or *",
        )
        parser.add_argument(
            "-a",
            "--actions",
            required=True,
            type=_list_option(_enum_option(Action, "action")),
            metavar="ACTION,…",
            help="Pub, Sub, Create, Update, Delete, Get, List or All",
        )
        parser.add_argument(
            "-i",
            "--source-ips",
            type=_list_option(str),
            default=[],
            metavar="PATTERN,…",
            help="client addresses it applies to: an IP, 10.0.0.0/8, 192.168.1.*, … (default: any)",
        )
        parser.add_argument(
            "-d",
            "--decision",
            type=_enum_option(Decision, "decision"),
            default=Decision.ALLOW,
            metavar="Allow|Deny",
            help="default: Allow",
        )
        policy_type(parser)

    def policy_type(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--policy-type",
            type=_enum_option(PolicyType, "policy type"),
            default=PolicyType.CUSTOM,
            metavar="Custom|Default",
            help="Default entries apply only where no Custom entry matches (default: Custom)",
        )

    create = _add_command(acl_commands, "create", _acl_create, "add entries to a subject's ACL")
    entries(create)
    update = _add_command(acl_commands, "update", _acl_update, "replace a subject's entries on resources")
    entries(update)
    delete = _add_command(
        acl_commands, "delete", _acl_delete, "delete a subject's ACL, or its entries on some resources"
    )
    subject(delete)
    delete.add_argument(
        "-r", "--resources", type=_list_option(_resource), metavar="RESOURCE,…", help="default: the whole ACL"
    )
    policy_type(delete)
    get = _add_command(acl_commands, "get", _acl_get, "show a subject's ACL")
    subject(get)
    listing = _add_command(acl_commands, "list", _acl_list, "list the ACLs")
    listing.add_argument("--subject-filter", metavar="TEXT", help="only subjects that contain TEXT")
    listing.add_argument(
        "--resource-filter", metavar="TEXT", help="only ACLs with an entry whose resource contains TEXT"
    )


# running them -------------------------------------------------------------------------------------


async def _each_target(
    admin: AdminClient, args: argparse.Namespace, request: Callable[[str], Awaitable[T]]
) -> list[tuple[str, T | CometMQError]]:
    """*request* on every target at once; each one's result or error, in target order."""
    targets: Sequence[str] = args.addr or await admin.auth_targets()
    outcomes = await asyncio.gather(*(request(addr) for addr in targets), return_exceptions=True)
    results: list[tuple[str, T | CometMQError]] = []
    for addr, outcome in zip(targets, outcomes, strict=True):
        if isinstance(outcome, BaseException) and not isinstance(outcome, CometMQError):
            raise outcome
        results.append((addr, outcome))
    return results


class _Shared:
    """The outcome at a server that refused a change because it was made there already, through a
    server before it in the same command: the two share their users and ACLs (a standalone's name
    server and broker)."""

    def __str__(self) -> str:
        return "(through a server before it: they share their users and ACLs)"


SHARED = _Shared()


async def _change_each(
    admin: AdminClient,
    args: argparse.Namespace,
    change: Callable[[str], Awaitable[None]],
    changed: Callable[[str], Awaitable[bool]],
) -> list[tuple[str, _Shared | CometMQError | None]]:
    """*change* on one target after the other, for a change a server refuses once it is made
    (creating a user, deleting a whole ACL). A target that refuses it, though *changed* (the state
    the change leads to) said no before the command and says yes after, got it through a server
    before it (:data:`SHARED`); any other refusal is its error."""
    targets: Sequence[str] = args.addr or await admin.auth_targets()
    before = await asyncio.gather(*(_probe(changed, addr) for addr in targets))
    results: list[tuple[str, _Shared | CometMQError | None]] = []
    for addr, was_changed in zip(targets, before, strict=True):
        try:
            await change(addr)
            results.append((addr, None))
        except CometMQError as exc:
            shared = isinstance(exc, BrokerError) and was_changed is False and await _probe(changed, addr)
            results.append((addr, SHARED if shared else exc))
    return results


async def _probe(changed: Callable[[str], Awaitable[bool]], addr: str) -> bool | None:
    """*changed* at *addr*; None when it cannot be told."""
    try:
        return await changed(addr)
    except CometMQError:
        return None


def _error_text(error: CometMQError) -> str:
    if isinstance(error, BrokerError):
        return f"{error.remark or 'refused'} (response code {error.code})"
    return str(error)


def _report(args: argparse.Namespace, results: list[tuple[str, Any]], done: str) -> None:
    """One line per server (or a JSON list); fails when any server refused."""
    if args.json:
        print_json([_json_result(addr, outcome, None) for addr, outcome in results])
    else:
        for addr, outcome in results:
            if isinstance(outcome, CometMQError):
                print(f"{addr}: failed: {_error_text(outcome)}")
            else:
                print(f"{addr}: {done}" + (f" {outcome}" if outcome is SHARED else ""))
    _fail_if_any(results)


def _json_result(addr: str, outcome: Any, value: Any) -> dict[str, Any]:
    if isinstance(outcome, CometMQError):
        return {"target": addr, "ok": False, "error": _error_text(outcome)}
    result: dict[str, Any] = {"target": addr, "ok": True}
    if outcome is SHARED:
        result["shared"] = True
    if value is not None:
        result.update(value)
    return result


def _fail_if_any(results: list[tuple[str, Any]]) -> None:
    failed = [addr for addr, outcome in results if isinstance(outcome, CometMQError)]
    if failed:
        raise CometMQError(
            f"{len(failed)} of {counted(len(results), 'server')} did not do it: {', '.join(failed)}"
        )


def _password(args: argparse.Namespace) -> str | None:
    if args.password != "-":
        return args.password  # type: ignore[no-any-return]
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise OptionError("--password -: stdin gave no password")
    return line


async def _user_create(admin: AdminClient, args: argparse.Namespace) -> None:
    password = _password(args)
    assert password is not None
    user = User(args.username, password, args.user_type, args.user_status)
    results = await _change_each(
        admin,
        args,
        lambda addr: admin.create_user(addr, user),
        lambda addr: _user_exists(admin, addr, args.username),
    )
    _report(args, results, f"created user {args.username} ({args.user_type.value})")


async def _user_update(admin: AdminClient, args: argparse.Namespace) -> None:
    password = _password(args)
    if password is None and args.user_type is None and args.user_status is None:
        raise OptionError("give what to change: --password, --user-type or --user-status")
    results = await _each_target(
        admin,
        args,
        lambda addr: admin.update_user(
            addr, args.username, password=password, user_type=args.user_type, user_status=args.user_status
        ),
    )
    _report(args, results, f"updated user {args.username}")


async def _user_delete(admin: AdminClient, args: argparse.Namespace) -> None:
    results = await _each_target(admin, args, lambda addr: admin.delete_user(addr, args.username))
    _report(args, results, f"deleted user {args.username}")


async def _user_exists(admin: AdminClient, addr: str, username: str) -> bool:
    return await admin.get_user(addr, username) is not None


async def _user_get(admin: AdminClient, args: argparse.Namespace) -> None:
    async def get(addr: str) -> list[User]:
        user = await admin.get_user(addr, args.username)
        return [] if user is None else [user]

    _print_users(args, await _each_target(admin, args, get))


async def _user_list(admin: AdminClient, args: argparse.Namespace) -> None:
    results = await _each_target(admin, args, lambda addr: admin.list_users(addr, args.filter))
    _print_users(args, results)


def _print_users(args: argparse.Namespace, results: list[tuple[str, list[User] | CometMQError]]) -> None:
    _print_found(
        args,
        results,
        "users",
        lambda user: user.to_dict(with_password=False),
        ["SERVER", "USERNAME", "TYPE", "STATUS"],
        lambda user: [[user.username, user.user_type.value, user.user_status.value]],
    )


def _acl_of(args: argparse.Namespace) -> Acl:
    entries = tuple(
        PolicyEntry(resource, tuple(args.actions), tuple(args.source_ips), args.decision)
        for resource in args.resources
    )
    return Acl(args.subject, (Policy(args.policy_type, entries),))


async def _acl_create(admin: AdminClient, args: argparse.Namespace) -> None:
    acl = _acl_of(args)
    results = await _each_target(admin, args, lambda addr: admin.create_acl(addr, acl))
    _report(args, results, f"created the ACL entries of {args.subject}")


async def _acl_update(admin: AdminClient, args: argparse.Namespace) -> None:
    acl = _acl_of(args)
    results = await _each_target(admin, args, lambda addr: admin.update_acl(addr, acl))
    _report(args, results, f"updated the ACL entries of {args.subject}")


async def _acl_delete(admin: AdminClient, args: argparse.Namespace) -> None:
    async def delete(addr: str) -> None:
        if not args.resources:
            await admin.delete_acl(addr, args.subject)
            return
        for resource in args.resources:  # an entry that is not there is no error
            await admin.delete_acl(addr, args.subject, args.policy_type, resource.key)

    async def deleted(addr: str) -> bool:
        try:
            return await admin.get_acl(addr, args.subject) is None
        except BrokerError:  # the user is not there
            return True

    results = await _change_each(admin, args, delete, deleted)
    what = (
        "the ACL" if not args.resources else "the ACL entries on " + ",".join(r.key for r in args.resources)
    )
    _report(args, results, f"deleted {what} of {args.subject}")


async def _acl_get(admin: AdminClient, args: argparse.Namespace) -> None:
    async def get(addr: str) -> list[Acl]:
        acl = await admin.get_acl(addr, args.subject)
        return [] if acl is None else [acl]

    _print_acls(args, await _each_target(admin, args, get))


async def _acl_list(admin: AdminClient, args: argparse.Namespace) -> None:
    results = await _each_target(
        admin, args, lambda addr: admin.list_acls(addr, args.subject_filter, args.resource_filter)
    )
    _print_acls(args, results)


def _print_acls(args: argparse.Namespace, results: list[tuple[str, list[Acl] | CometMQError]]) -> None:
    _print_found(
        args,
        results,
        "acls",
        Acl.to_dict,
        ["SERVER", "SUBJECT", "POLICY", "RESOURCE", "ACTIONS", "SOURCE IPS", "DECISION"],
        lambda acl: [
            [
                acl.subject,
                policy.policy_type.value,
                entry.resource.key,
                ",".join(action.value for action in entry.actions),
                ",".join(entry.source_ips) or "*",
                entry.decision.value,
            ]
            for policy in acl.policies
            for entry in policy.entries
        ],
    )


def _print_found(
    args: argparse.Namespace,
    results: list[tuple[str, list[T] | CometMQError]],
    json_key: str,
    to_json: Callable[[T], dict[str, Any]],
    headers: list[str],
    rows_of: Callable[[T], list[list[str]]],
) -> None:
    """What each server found (users, ACLs): a JSON list of its *json_key* per server, else a table of
    *headers* with the server first and *rows_of* each thing found; fails when any server refused."""
    if args.json:
        print_json(
            [
                _json_result(
                    addr,
                    outcome,
                    None
                    if isinstance(outcome, CometMQError)
                    else {json_key: [to_json(found) for found in outcome]},
                )
                for addr, outcome in results
            ]
        )
    else:
        blanks = ["-"] * (len(headers) - 2)
        rows: list[list[str]] = []
        for addr, outcome in results:
            if isinstance(outcome, CometMQError):
                rows.append([addr, *blanks, f"failed: {_error_text(outcome)}"])
            elif not outcome:
                rows.append([addr, "(none)", *blanks])
            else:
                rows.extend([addr, *row] for found in outcome for row in rows_of(found))
        print(format_table(headers, rows))
    _fail_if_any(results)
