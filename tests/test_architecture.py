"""The module map of docs/architecture.md, enforced: who may import whom.

Each module belongs to one room (`durable_tools/` core modules, `models/`,
`providers/`, `mcp/`, `activities/`, `workflows/`, `worker/`); a room imports
only the rooms below it. Workflow code imports no I/O: it runs in Temporal's
sandbox and is replayed, so its modules import only the standard library's
pure parts, Temporal, pydantic and the core. And every module has one name:
nothing imports the checkout's top-level `workflows`, `activities` or `worker`
folders by those names (they install as `durable_tools.workflows`, ...).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MAPPED = ("workflows", "activities", "worker")
"""Top-level folders that install as `durable_tools.<name>` (pyproject's package-dir)."""

ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset({"core", "models"}),
    "providers": frozenset({"core", "providers"}),
    "models": frozenset({"core", "models", "providers"}),
    "mcp": frozenset({"core", "mcp"}),
    "activities": frozenset({"core", "models", "mcp", "activities"}),
    "workflows": frozenset({"core", "workflows"}),
}
"""Rooms each room may import (`worker` and the `testing` harness may import any)."""

WORKFLOW_EXTERNAL = frozenset(
    {
        "__future__",
        "asyncio",
        "base64",
        "builtins",
        "collections",
        "dataclasses",
        "datetime",
        "enum",
        "functools",
        "itertools",
        "math",
        "typing",
        "pydantic",
        "pydantic_core",
        "temporalio",
    }
)
"""What workflow modules may import besides `durable_tools`: no I/O, clocks or randomness."""


def _source_files() -> Iterator[tuple[str, Path]]:
    """Every source module with its installed name (links are not followed)."""
    for path in sorted((ROOT / "durable_tools").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[1] in MAPPED:
            continue  # the links to the top-level folders
        yield _module_name(relative.parts), path
    for top in MAPPED:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield _module_name(("durable_tools", *path.relative_to(ROOT).parts)), path


def _module_name(parts: tuple[str, ...]) -> str:
    names = [*parts[:-1], parts[-1].removesuffix(".py")]
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def _room(module: str) -> str:
    if module == "durable_tools.testing":
        return "testing"
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in {*ALLOWED, "worker"} - {"core"}:
        return parts[1]
    return "core"


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """Absolute imports of a module, outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text(), str(path))
    checking: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            checking.update(id(child) for inner in node.body for child in ast.walk(inner))
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            # `from durable_tools import workflows` names a room too.
            if node.module == "durable_tools":
                for alias in node.names:
                    yield node.lineno, f"durable_tools.{alias.name}"


def test_rooms_import_only_the_rooms_below() -> None:
    wrong: list[str] = []
    for module, path in _source_files():
        room = _room(module)
        allowed = ALLOWED.get(room)
        if allowed is None:
            continue
        for line, name in _imports(path):
            if not name.startswith("durable_tools.") or name == "durable_tools":
                continue
            target = _room(name)
            if target not in allowed and target != "testing":
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({room}) imports {name} ({target})")
            if target == "testing":
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports the testing harness")
    assert wrong == []


def test_workflow_modules_import_no_io() -> None:
    wrong: list[str] = []
    for module, path in _source_files():
        if _room(module) != "workflows":
            continue
        for line, name in _imports(path):
            top = name.split(".")[0]
            if top != "durable_tools" and top not in WORKFLOW_EXTERNAL:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert wrong == []


def test_every_module_has_one_name() -> None:
    wrong: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in (".venv", "node_modules", "build") or relative.parts[0].startswith(
            "."
        ):
            continue
        if (
            relative.parts[0] == "durable_tools"
            and relative.parts[1:2]
            and relative.parts[1] in MAPPED
        ):
            continue
        for line, name in _imports(path):
            if name.split(".")[0] in MAPPED:
                wrong.append(f"{relative}:{line} imports {name}")
    assert wrong == []


def test_the_rules_see_every_room() -> None:
    # A rule that matched no module would pass for nothing.
    rooms = {_room(module) for module, _ in _source_files()}
    assert rooms == {*ALLOWED, "worker", "testing"}
    assert _room("durable_tools.workflows.agent_workflow") == "workflows"
    assert _room("durable_tools.worker.inbox.app") == "worker"
    assert _room("durable_tools.conversation") == "core"
    assert _room("durable_tools.models.base") == "models"


def test_the_map_names_every_module() -> None:
    # docs/architecture.md's map: a newcomer finds each module's room there.
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## The map") : text.index("## One turn")]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    missing: list[str] = []
    for module, path in _source_files():
        room = _room(module)
        named = f"`{path.name}`"
        if not any(row.startswith(f"| {room} ") and named in row for row in rows):
            if path.name == "__init__.py" and room != "core":
                continue  # a package's own __init__ holds its exports
            missing.append(f"{path.relative_to(ROOT)} ({room})")
    assert missing == []
