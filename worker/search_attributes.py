"""The search attributes conversations upsert, and the worker's check for them at start.

A conversation upserts `DurableToolsPendingCount` (Int) and
`DurableToolsPendingKinds` (KeywordList) whenever what it waits for changes.
On a namespace that lacks them, Temporal fails that workflow task
(`BadSearchAttributes`) and retries it forever: the conversation is stuck.
So every worker with `DurableToolsPlugin` (`run_worker`, `durable-tools
worker`, or `Worker(client, ...)` on a client with the plugin) checks the
namespace when it starts and refuses to, naming the `temporal operator
search-attribute create ...` command that registers them, unless it runs with
search attributes off (`durable-tools worker --no-search-attributes`,
`run_worker(search_attributes=False)`, `DurableToolsPlugin(search_attributes=False)`).
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_tools.errors import ConfigurationError
from durable_tools.teams import TEAM
from durable_tools.workflows.visibility import PENDING_COUNT, PENDING_KINDS

__all__ = ["SEARCH_ATTRIBUTES", "check_search_attributes", "create_command"]

SEARCH_ATTRIBUTES: Mapping[str, str] = {
    PENDING_COUNT.name: "Int",
    PENDING_KINDS.name: "KeywordList",
    TEAM.name: "Keyword",
}
"""durable-tools' search attributes and their Temporal types (the CLI's `--type` names):
what conversations upsert, and the team a client sets at start (`durable_tools.teams`)."""

_TYPE_NAMES: Mapping[int, str] = {
    IndexedValueType.INDEXED_VALUE_TYPE_TEXT: "Text",
    IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD: "Keyword",
    IndexedValueType.INDEXED_VALUE_TYPE_INT: "Int",
    IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE: "Double",
    IndexedValueType.INDEXED_VALUE_TYPE_BOOL: "Bool",
    IndexedValueType.INDEXED_VALUE_TYPE_DATETIME: "Datetime",
    IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST: "KeywordList",
}

_log = logging.getLogger(__name__)

_OPT_OUT = (
    "or run the worker without them (--no-search-attributes; in code search_attributes=False)"
)


def create_command(address: str, namespace: str, missing: Mapping[str, str]) -> str:
    """The shell command that registers `missing` (name to type) on `namespace`.

    The Temporal CLI takes one `--type` per command, so attributes of different
    types become commands joined with `&&`.
    """
    by_type: dict[str, list[str]] = {}
    for name, kind in missing.items():
        by_type.setdefault(kind, []).append(name)
    commands: list[str] = []
    for kind, names in by_type.items():
        args = ["temporal", "operator", "search-attribute", "create"]
        args += ["--address", address, "--namespace", namespace]
        for name in names:
            args += ["--name", name]
        args += ["--type", kind]
        commands.append(shlex.join(args))
    return " && ".join(commands)


async def check_search_attributes(client: Client, *, address: str, namespace: str) -> None:
    """Fail unless `namespace` has `SEARCH_ATTRIBUTES` with their types.

    Args:
        client: A client connected to the namespace.
        address: The frontend address, for the command in the message.
        namespace: The namespace to check.

    Raises:
        ConfigurationError: One is missing or has another type; the one-line
            message holds the command to run, and the opt-out.
        temporalio.service.RPCError: The server failed the lookup (other than
            refusing it: a client without the permission, e.g. on Temporal
            Cloud, only logs a warning and the check is skipped).
    """
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
    except RPCError as exc:
        if exc.status in (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED):
            _log.warning(
                "cannot list the search attributes of namespace %r (%s); make sure %s are "
                "registered (docs/operations.md)",
                namespace,
                exc.message,
                ", ".join(SEARCH_ATTRIBUTES),
            )
            return
        raise
    registered = {
        name: _TYPE_NAMES.get(kind, str(kind)) for name, kind in listed.custom_attributes.items()
    }
    wrong = {
        name: (registered[name], kind)
        for name, kind in SEARCH_ATTRIBUTES.items()
        if name in registered and registered[name] != kind
    }
    if wrong:
        found = ", ".join(f"{name} is {got}, not {want}" for name, (got, want) in wrong.items())
        raise ConfigurationError(
            f"namespace {namespace!r} has search attributes of the wrong type ({found}): "
            "remove them (`temporal operator search-attribute remove`) and run "
            f"`{create_command(address, namespace, {n: w for n, (_, w) in wrong.items()})}`, "
            + _OPT_OUT
        )
    missing = {name: kind for name, kind in SEARCH_ATTRIBUTES.items() if name not in registered}
    if missing:
        raise ConfigurationError(
            f"namespace {namespace!r} lacks the search attributes of conversations "
            f"({', '.join(missing)}): run `{create_command(address, namespace, missing)}`, "
            + _OPT_OUT
        )
