"""What only the garbage collector frees, and the reference cycles that keep it: a debug aid.

An object in a reference cycle is not freed when its last outside reference
goes; it waits for a collection of its generation, and an object that lived
through a conversation's turns sits in the oldest one, which CPython collects
only once a quarter more objects reached it since the last time. So the
cycles a worker makes per conversation or per activity decide how much
memory waits for a full collection, and how much work those collections do
(issue 26, item 4). `scale_worker.py`'s `garbage` command calls
`cyclic_garbage()`: run it with automatic collection held off
(`SCALE_WORKER_GC_THRESHOLD=100000000`) partway through a phase to see what
the runs and activities that ended left.

`cyclic_garbage()` collects with `gc.DEBUG_SAVEALL` (what a collection would
free is kept in `gc.garbage` instead), groups it by type, finds its strongly
connected components (the cycles proper; everything else in the garbage
hangs off one), groups those by the types in them, and prints one shortest
cycle of each group, edge by edge (`.attribute`, `[key]`, `cell`, ...).
"""

from __future__ import annotations

import gc
import types
from collections import Counter, deque
from typing import Any, cast

__all__ = ["collect_garbage", "cyclic_garbage"]


def _name(o: object) -> str:
    name = type(o).__name__
    if isinstance(o, types.FunctionType | types.MethodType | types.CoroutineType):
        name += ":" + str(getattr(cast(object, o), "__qualname__", ""))
    elif isinstance(o, types.FrameType):
        name += ":" + o.f_code.co_qualname
    elif isinstance(o, types.CellType):
        try:
            name += "->" + type(o.cell_contents).__name__
        except ValueError:  # an empty cell
            name += "->(empty)"
    return name


def _edge(parent: Any, child: object) -> str:
    """How `parent` refers to `child`, as far as can be told."""
    if isinstance(parent, dict):
        for key, value in cast(dict[Any, Any], parent).items():
            if value is child:
                return f"[{key!r}]"[:40]
        return "key"
    if isinstance(parent, list | tuple | deque | set | frozenset):
        return "item"
    if isinstance(parent, types.MethodType):
        return "__self__" if parent.__self__ is child else "__func__"
    if isinstance(parent, types.CellType):
        return "cell"
    if isinstance(parent, types.FunctionType):
        return "closure" if any(c is child for c in parent.__closure__ or ()) else "function"
    if isinstance(parent, types.FrameType):
        return next((f"local {k}" for k, v in parent.f_locals.items() if v is child), "frame")
    attributes = cast(dict[str, Any] | None, getattr(parent, "__dict__", None))
    if attributes is child:
        return "__dict__"
    for key, value in (attributes or {}).items():
        if value is child:
            return "." + key
    kind: type = type(cast(object, parent))
    slots = cast(tuple[str, ...], getattr(kind, "__slots__", ()))
    for slot in slots:
        if getattr(parent, slot, None) is child:
            return "." + slot
    return "?"


def _components(adjacent: list[list[int]]) -> list[list[int]]:
    """Strongly connected components with a cycle in them (Tarjan's, without recursion)."""
    count = len(adjacent)
    index: list[int | None] = [None] * count
    low, on_stack, stack = [0] * count, [False] * count, list[int]()
    found: list[list[int]] = []
    counter = 0
    for root in range(count):
        if index[root] is not None:
            continue
        work = [(root, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack[node] = True
            descended = False
            for k in range(position, len(adjacent[node])):
                child = adjacent[node][k]
                child_index = index[child]
                if child_index is None:
                    work += [(node, k + 1), (child, 0)]
                    descended = True
                    break
                if on_stack[child]:
                    low[node] = min(low[node], child_index)
            if descended:
                continue
            if low[node] == index[node]:
                component: list[int] = []
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in adjacent[node]:
                    found.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def _shortest_cycle(start: int, members: set[int], adjacent: list[list[int]]) -> list[int]:
    previous: dict[int, int | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in adjacent[node]:
            if child == start:
                path = [node]
                while (before := previous[path[-1]]) is not None:
                    path.append(before)
                return [*reversed(path), start]
            if child in members and child not in previous:
                previous[child] = node
                queue.append(child)
    return []


def collect_garbage() -> list[object]:
    """Collect; what the collection freed (`gc.DEBUG_SAVEALL`, `gc.garbage` left empty)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)


def cyclic_garbage(limit: int = 12) -> dict[str, Any]:
    """Collect, keeping what the collection found; describe it (see the module).

    Returns:
        `objects` (how many), `by type` (the `limit` most numerous), `cycles`
        (strongly connected components), and `groups`: for the `limit` most
        frequent kinds of cycle, how many, their size and one cycle's edges.
    """
    garbage = collect_garbage()
    position = {id(o): k for k, o in enumerate(garbage)}
    adjacent = [
        [position[id(r)] for r in gc.get_referents(o) if id(r) in position] for o in garbage
    ]
    components = _components(adjacent)
    kinds: Counter[tuple[tuple[str, int], ...]] = Counter()
    example: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for component in components:
        kind = tuple(Counter(_name(garbage[k]) for k in component).most_common(6))
        kinds[kind] += 1
        example.setdefault(kind, component)
    groups: list[dict[str, Any]] = []
    for kind, count in kinds.most_common(limit):
        component = example[kind]
        path = _shortest_cycle(component[0], set(component), adjacent)
        groups.append({
            "count": count,
            "size": len(component),
            "types": dict(kind),
            "cycle": [
                f"{_name(garbage[a])} --{_edge(garbage[a], garbage[b])}--> {_name(garbage[b])}"
                for a, b in zip(path, path[1:], strict=False)
            ],
        })  # fmt: skip
    by_type = Counter(type(o).__name__ for o in garbage).most_common(limit)
    del garbage
    return {
        "objects": len(position),
        "by type": dict(by_type),
        "cycles": len(components),
        "groups": groups,
    }
