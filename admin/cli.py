"""``kafscale-admin``: topics, groups, transactions and brokers of any Kafka-protocol
cluster, as a table or JSON. Exit status: 0 done, 1 the cluster refused or failed, 2 usage."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kafscale.kafka_client import Cluster, ClusterError, Security
from kafscale.kafka_client.connection import ConnectionLost
from kafscale.kafka_client.security import SecurityError

from . import operations

__all__ = ["main"]


def _pairs(items: Sequence[str]) -> dict[str, str]:
    found = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{item!r} is not key=value")
        found[key] = value
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafscale-admin", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", "-b", default=os.environ.get("KAFSCALE_ADMIN_BOOTSTRAP", "127.0.0.1:9092"),
                        help="host:port[,host:port] (env KAFSCALE_ADMIN_BOOTSTRAP; default 127.0.0.1:9092)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    security = parser.add_argument_group("security (as the gateway's clients connect)")
    security.add_argument("--security-protocol", default="PLAINTEXT",
                          choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))
    security.add_argument("--sasl-mechanism", choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))
    security.add_argument("--sasl-username")
    security.add_argument("--ssl-cafile", help="PEM CAs the gateway's certificate chains to (default: the system's)")
    security.add_argument("--ssl-certfile", help="PEM client certificate (mutual TLS)")
    security.add_argument("--ssl-keyfile")
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("brokers", help="the cluster's brokers (gateways) and its controller")

    topics = commands.add_parser("topics", help="list, describe, create, alter configs, delete").add_subparsers(
        dest="action", required=True)
    listed = topics.add_parser("list")
    listed.add_argument("--internal", action="store_true", help="include internal topics (__consumer_offsets)")
    topics.add_parser("describe").add_argument("topic")
    create = topics.add_parser("create")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    alter = topics.add_parser("alter-configs")
    alter.add_argument("topic")
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    alter.add_argument("--delete", action="append", default=[], metavar="KEY")
    topics.add_parser("delete").add_argument("topic")

    groups = commands.add_parser("groups", help="list, describe with lag, reset offsets").add_subparsers(
        dest="action", required=True)
    groups.add_parser("list")
    groups.add_parser("describe").add_argument("group")
    reset = groups.add_parser("reset-offsets", help="the group must have no members")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--to", required=True, help="earliest, latest, or an offset")

    transactions = commands.add_parser("transactions", help="list, describe, find-hanging, abort").add_subparsers(
        dest="action", required=True)
    transactions.add_parser("list")
    transactions.add_parser("describe").add_argument("transactional_id")
    transactions.add_parser("find-hanging", help="open transactions no coordinator will end").add_argument(
        "--topic", required=True)
    abort = transactions.add_parser("abort", help="write an abort marker for a hanging transaction")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, required=True)

    acls = commands.add_parser("acls", help="list, create, delete").add_subparsers(dest="action", required=True)
    listed_acls = acls.add_parser("list")
    listed_acls.add_argument("--resource-type", default="any", choices=_RESOURCE_TYPES + ("any",))
    listed_acls.add_argument("--resource")
    listed_acls.add_argument("--principal")
    for action in ("create", "delete"):
        acl = acls.add_parser(action)
        acl.add_argument("--resource-type", required=True, choices=_RESOURCE_TYPES)
        acl.add_argument("--resource", required=action == "create", help="name (cluster: kafka-cluster)")
        acl.add_argument("--pattern", default="literal", choices=("literal", "prefixed"))
        acl.add_argument("--principal", required=action == "create", help="User:name")
        acl.add_argument("--host", default="*" if action == "create" else None)
        acl.add_argument("--operation", required=action == "create",
                         choices=_OPERATIONS if action == "create" else _OPERATIONS + ("any",))
        acl.add_argument("--permission", default="allow" if action == "create" else "any",
                         choices=("allow", "deny") if action == "create" else ("allow", "deny", "any"))

    users = commands.add_parser("users", help="SCRAM users: list, upsert, delete").add_subparsers(
        dest="action", required=True)
    users.add_parser("list")
    for action in ("upsert", "delete"):
        user = users.add_parser(action, help="the password from KAFSCALE_ADMIN_USER_PASSWORD" if action == "upsert"
                                else None)
        user.add_argument("user")
        user.add_argument("--mechanism", default="SCRAM-SHA-512", choices=("SCRAM-SHA-256", "SCRAM-SHA-512"))
        if action == "upsert":
            user.add_argument("--iterations", type=int, default=8192)
    return parser


_RESOURCE_TYPES = ("topic", "group", "cluster", "transactional_id")
_OPERATIONS = ("all", "read", "write", "create", "delete", "alter", "describe", "cluster_action", "describe_configs",
               "alter_configs", "idempotent_write")


def _password() -> str:
    password = os.environ.get("KAFSCALE_ADMIN_USER_PASSWORD")
    if not password:
        raise argparse.ArgumentTypeError("set the new user's password in KAFSCALE_ADMIN_USER_PASSWORD "
                                         "(never on the command line)")
    return password


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)"
    columns = list(rows[0])
    cells = [[("" if row.get(c) is None else str(row.get(c))) for c in columns] for row in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in cells]
    return "\n".join(lines)


def _show(result: Any, as_json: bool) -> str:
    if as_json:
        return json.dumps(result, indent=2, default=str)
    if isinstance(result, list):
        return _table(result)
    parts = []
    scalars = {k: v for k, v in result.items() if not isinstance(v, (list, dict))}
    parts.append("\n".join(f"{k}: {v}" for k, v in scalars.items()))
    for key, value in result.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            parts.append(f"\n{key}:\n{_table(value)}")
        elif isinstance(value, dict):
            parts.append(f"\n{key}:\n" + ("\n".join(f"  {k} = {v}" for k, v in sorted(value.items())) or "  (none)"))
        elif isinstance(value, list):
            parts.append(f"\n{key}: {', '.join(map(str, value)) or '(none)'}")
    return "\n".join(parts)


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty() or total > 100:
        print(f"\r{done}/{total} partitions", end="\n" if done == total else "", file=sys.stderr, flush=True)


def _operation(args: argparse.Namespace) -> Callable[[Cluster], Any]:
    match args.command, getattr(args, "action", None):
        case "brokers", _:
            return operations.brokers
        case "topics", "list":
            return lambda c: operations.list_topics(c, internal=args.internal)
        case "topics", "describe":
            return lambda c: operations.describe_topic(c, args.topic)
        case "topics", "create":
            return lambda c: operations.create_topic(c, args.topic, args.partitions, _pairs(args.config))
        case "topics", "alter-configs":
            return lambda c: operations.alter_topic_configs(c, args.topic, _pairs(args.set), args.delete)
        case "topics", "delete":
            return lambda c: operations.delete_topic(c, args.topic)
        case "groups", "list":
            return operations.list_groups
        case "groups", "describe":
            return lambda c: operations.describe_group(c, args.group)
        case "groups", "reset-offsets":
            return lambda c: operations.reset_offsets(c, args.group, args.topic, args.to, progress=_progress)
        case "transactions", "list":
            return operations.list_transactions
        case "transactions", "describe":
            return lambda c: operations.describe_transaction(c, args.transactional_id)
        case "transactions", "find-hanging":
            return lambda c: operations.find_hanging(c, args.topic)
        case "transactions", "abort":
            return lambda c: operations.abort_transaction(c, args.topic, args.partition, args.start_offset)
        case "acls", "list":
            return lambda c: operations.list_acls(c, args.resource_type, args.resource, args.principal)
        case "acls", "create":
            return lambda c: operations.create_acl(c, args.resource_type, args.resource, args.pattern, args.principal,
                                                   args.host, args.operation, args.permission)
        case "acls", "delete":
            return lambda c: operations.delete_acls(c, args.resource_type, args.resource, args.pattern,
                                                    args.principal, args.host, args.operation or "any",
                                                    args.permission)
        case "users", "list":
            return operations.list_users
        case "users", "upsert":
            password = _password()
            return lambda c: operations.upsert_user(c, args.user, password, args.mechanism, args.iterations)
        case "users", "delete":
            return lambda c: operations.delete_user(c, args.user, args.mechanism)
    raise AssertionError(f"unhandled command {args.command} {args.action}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        security = Security(args.security_protocol, args.sasl_mechanism, args.sasl_username,
                            os.environ.get("KAFSCALE_ADMIN_PASSWORD") if args.sasl_mechanism else None,
                            args.ssl_cafile, args.ssl_certfile, args.ssl_keyfile)
        operation = _operation(args)
    except (SecurityError, argparse.ArgumentTypeError) as exc:
        parser.error(str(exc))
    try:
        with Cluster(args.bootstrap_server, security, timeout_s=args.timeout, client_id="kafscale-admin") as cluster:
            result = operation(cluster)
    except (operations.AdminError, ClusterError, ConnectionLost, OSError, ValueError) as exc:
        print(f"kafscale-admin: {exc}", file=sys.stderr)
        return 1
    print(_show(result, args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
