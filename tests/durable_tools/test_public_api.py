"""The package's public surface: `__all__` is sorted and complete, and documented."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import durable_tools

INIT = Path(durable_tools.__file__)


def _imported_names() -> set[str]:
    tree = ast.parse(INIT.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            names.update(alias.asname or alias.name for alias in node.names)
    return {n for n in names if not n.startswith("_")}


def test_all_is_sorted() -> None:
    assert durable_tools.__all__ == sorted(durable_tools.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(durable_tools.__all__) == len(set(durable_tools.__all__))


def test_every_public_import_is_listed() -> None:
    missing = _imported_names() - set(durable_tools.__all__)
    assert not missing, f"imported in __init__ but not in __all__: {sorted(missing)}"


def test_every_listed_name_exists() -> None:
    absent = [n for n in durable_tools.__all__ if not hasattr(durable_tools, n)]
    assert not absent


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, Any] = {}
    exec("from durable_tools import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(durable_tools.__all__)


def _own_parameters(fn: Any) -> list[str]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters if p not in ("self", "cls")]


def _public_functions_and_classes() -> list[tuple[str, Any]]:
    return [
        (name, obj)
        for name in durable_tools.__all__
        if inspect.isfunction(obj := getattr(durable_tools, name)) or inspect.isclass(obj)
    ]


def _own_methods(cls: type) -> list[tuple[str, Any]]:
    """Public methods a class defines itself in durable_tools (not inherited ones)."""
    found: list[tuple[str, Any]] = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        fn = member.__func__ if isinstance(member, classmethod | staticmethod) else member
        if inspect.isfunction(fn) and fn.__module__.startswith("durable_tools"):
            found.append((f"{cls.__name__}.{name}", fn))
    return found


def test_public_names_cover_functions_and_classes() -> None:
    names = {n for n, _ in _public_functions_and_classes()}
    # A guard against the docstring tests below silently checking nothing.
    assert {"tool", "Toolkit", "compose", "parse_arguments", "Failure"} <= names


def test_every_public_function_and_class_has_a_docstring() -> None:
    undocumented = [
        name for name, obj in _public_functions_and_classes() if not (obj.__doc__ or "").strip()
    ]
    assert not undocumented


def test_functions_with_parameters_document_them_in_args() -> None:
    problems: list[str] = []
    targets: list[tuple[str, Any]] = []
    for name, obj in _public_functions_and_classes():
        if inspect.isfunction(obj):
            targets.append((name, obj))
        else:
            targets.extend(_own_methods(obj))
    for name, fn in targets:
        params = [p.lstrip("*") for p in _own_parameters(fn)]
        if not params:
            continue
        doc = inspect.getdoc(fn) or ""
        if "Args:" not in doc:
            problems.append(f"{name}: no Args: section")
            continue
        args_section = doc.split("Args:", 1)[1]
        problems.extend(
            f"{name}: parameter {p!r} not described" for p in params if f"{p}:" not in args_section
        )
    assert not problems, "\n".join(problems)


def test_classes_with_their_own_init_document_its_arguments() -> None:
    problems: list[str] = []
    for name, cls in _public_functions_and_classes():
        if not inspect.isclass(cls):
            continue
        init = vars(cls).get("__init__")
        if init is None or not inspect.isfunction(init) or "__dataclass" in repr(init):
            continue
        if not init.__module__.startswith("durable_tools"):
            continue
        params = [p.lstrip("*") for p in _own_parameters(init)]
        doc = inspect.getdoc(cls) or ""
        if params and "Args:" not in doc and "Attributes:" not in doc:
            problems.append(name)
    assert not problems
