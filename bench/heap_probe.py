"""What holds the pymalloc arenas a burst opened: a debug aid for `scale_worker.py`.

Python's small-object allocator (pymalloc) takes memory from the system in
1 MiB arenas of 16 KiB pools, and gives an arena back only once every block in
it is free. After a burst, a handful of live objects per arena keep the
arenas the burst opened (issue 26, item 4). `gc.get_objects()` cannot say
which: most such blocks are not objects the collector tracks (strings,
integers, a dict's key table, objects a C extension keeps).

`PoolScan` reads the pools themselves (CPython 3.11+, 64-bit, the default
16 KiB pools; read only, with `ctypes`): `mark()` records the pools in use
now; `survivors()` lists the allocated blocks of every pool that was not in
use at the mark (pools the burst carved), each named by its object's type
where the block starts with an object (`repr` and referrers for a sample).

`SCALE_WORKER_POOLS=/tmp/p.jsonl` makes `scale_worker.py` mark at its first
`gc` or `mark` command and append what survived at each later one.
"""

from __future__ import annotations

import ctypes
import gc
import re
import sys
import tracemalloc
from array import array
from collections import Counter
from typing import Any, cast

POOL_SIZE = 16 * 1024
POOL_OVERHEAD = 48  # sizeof(struct pool_header), rounded up to 16
_HEADER = 48
_GC_HEAD = 16  # PyGC_Head before a tracked object
_PROBE_INT = "int >= 2**40 (addresses: the probe's own, mostly)"


def _mappings() -> list[tuple[int, int]]:
    """Readable and writable anonymous mappings of this process (where arenas are)."""
    found: list[tuple[int, int]] = []
    with open("/proc/self/maps") as maps:  # noqa: PTH123 (a probe of this process)
        for line in maps:
            parts = line.split()
            if parts[1].startswith("rw") and (len(parts) < 6 or not parts[5].startswith("/")):
                if len(parts) >= 6 and parts[5] in ("[stack]", "[vvar]", "[vsyscall]"):
                    continue
                start, end = (int(x, 16) for x in parts[0].split("-"))
                found.append((start, end))
    return found


def _resident(start: int, end: int) -> set[int]:
    """Pages of [start, end) that are resident (reading others would make them so)."""
    pages: set[int] = set()
    with open("/proc/self/pagemap", "rb") as pagemap:  # noqa: PTH123
        pagemap.seek(start // 4096 * 8)
        data = pagemap.read((end - start) // 4096 * 8)
    for k in range(len(data) // 8):
        if int.from_bytes(data[k * 8 : k * 8 + 8], "little") >> 63:
            pages.add(start + k * 4096)
    return pages


def _pools() -> dict[int, tuple[int, int, array[int]]]:
    """Pools in use: address -> (block size, arena index, allocated block addresses).

    The addresses go in arrays, not lists of ints: the probe's own objects
    would otherwise fill the pools it reads."""
    pools: dict[int, tuple[int, int, array[int]]] = {}
    for start, end in _mappings():
        try:
            resident = _resident(start, end)
        except OSError:  # no pagemap: read only what is surely mapped
            resident = set(range(start, end, 4096))
        first = (start + POOL_SIZE - 1) // POOL_SIZE * POOL_SIZE
        for pool in range(first, end - POOL_SIZE + 1, POOL_SIZE):
            if pool not in resident:
                continue
            header = ctypes.string_at(pool, _HEADER)
            count = int.from_bytes(header[0:4], "little")
            freeblock = int.from_bytes(header[8:16], "little")
            arena, szidx, nextoffset, maxnext = (
                int.from_bytes(header[k : k + 4], "little") for k in (32, 36, 40, 44)
            )
            size = (szidx + 1) * 16
            if not (
                szidx < 32
                and maxnext == POOL_SIZE - size
                and POOL_OVERHEAD <= nextoffset <= maxnext + size
                and (nextoffset - POOL_OVERHEAD) % size == 0
                and 0 < count <= (nextoffset - POOL_OVERHEAD) // size
            ):
                continue
            free: set[int] = set()
            block = freeblock
            while block and pool <= block < pool + POOL_SIZE and block not in free:
                free.add(block)
                block = int.from_bytes(ctypes.string_at(block, 8), "little")
            if block:  # a free list leaving the pool: not a pool
                continue
            used = array(
                "Q",
                (b for b in range(pool + POOL_OVERHEAD, pool + nextoffset, size) if b not in free),
            )
            if len(used) != count:
                continue
            pools[pool] = (size, arena, used)
    return pools


def _types() -> dict[int, type]:
    """Every type this process knows, by address."""
    found: dict[int, type] = {}
    stack: list[type] = [object, type]
    stack += [type(o) for o in gc.get_objects()]
    while stack:
        t = stack.pop()
        if id(t) in found:
            continue
        found[id(t)] = t
        try:
            stack += type.__subclasses__(t)
        except TypeError:
            pass
    return found


def object_counts(limit: int = 40) -> dict[str, int]:
    """The objects the collector tracks, by type (the most numerous `limit`)."""
    return dict(Counter(type(o).__name__ for o in gc.get_objects()).most_common(limit))


class PoolScan:
    """The pools in use at a mark; the live blocks of the pools carved since (see the module)."""

    def __init__(self) -> None:
        self.marked: set[int] | None = None
        self.arenas: dict[int, int] = {}  # arena index -> one of its pools' address

    def mark(self) -> int:
        """Record the pools in use now; how many."""
        gc.collect()
        pools = _pools()
        self.marked = set(pools)
        self.arenas = {arena: pool for pool, (_, arena, _) in pools.items()}
        return len(self.marked)

    def survivors(self, samples: int = 4) -> dict[str, Any]:
        """The live blocks of pools carved since the mark: by type, with samples."""
        gc.collect()
        marked = self.marked or set()
        pools = _pools()
        types = _types()
        new = {p: v for p, v in pools.items() if p not in marked}
        # an arena opened since the mark: an index not seen, or seen 1 MiB away (reused)
        new_arenas = {
            arena
            for pool, (_, arena, _) in new.items()
            if abs(pool - self.arenas.get(arena, -(1 << 62))) >= 1 << 20
        }
        by_type: Counter[str] = Counter()
        by_size: Counter[int] = Counter()
        objects: dict[str, list[int]] = {}
        holding: dict[int, Counter[str]] = {}  # new arena -> what lives in it
        arena_of: dict[int, int] = {}
        raw_sites: Counter[str] = Counter()  # blocks that are not objects, by where allocated
        for size, arena, used in new.values():
            for block in used:
                by_size[size] += 1
                name = "(not an object)"
                for offset in (0, _GC_HEAD):
                    if size < offset + 16:
                        continue
                    ob_type = int.from_bytes(ctypes.string_at(block + offset + 8, 8), "little")
                    refcnt = int.from_bytes(ctypes.string_at(block + offset, 8), "little")
                    if ob_type in types and 0 < refcnt < 1 << 40:
                        name = types[ob_type].__name__ + (" (tracked)" if offset else "")
                        if name == "int" and _int_value(block) >= 1 << 40:
                            name = _PROBE_INT
                        objects.setdefault(name, []).append(block + offset)
                        arena_of[block + offset] = arena
                        break
                by_type[name] += 1
                if name == "(not an object)" and arena in new_arenas:
                    raw_sites[f"{size} B: {_allocated_at(block)}"] += 1
                if arena in new_arenas:
                    holding.setdefault(arena, Counter())[name] += 1
        within: Counter[str] = Counter()  # arenas each kind of block is found in
        for held in holding.values():
            within.update(set(held))
        only: Counter[str] = Counter()  # arenas that only one kind of block holds
        for held in holding.values():
            kinds = set(held) - {_PROBE_INT}
            only[next(iter(kinds)) if len(kinds) == 1 else "(mixed)" if kinds else _PROBE_INT] += 1
        sampled: list[dict[str, Any]] = []
        for name, _ in within.most_common(12):
            in_new = [a for a in objects.get(name, []) if arena_of.get(a) in new_arenas]
            for address in in_new[:: max(1, len(in_new) // samples)][:samples]:
                obj = ctypes.cast(address, ctypes.py_object).value
                sample = {"type": name, "repr": _short(obj), "referrers": _referrers(obj)}
                where = tracemalloc.get_object_traceback(obj)
                if where is not None:  # tracing: where it was allocated, innermost last
                    sample["allocated at"] = [f"{f.filename}:{f.lineno}" for f in where][-6:]
                sampled.append(sample)
                del obj
        return {
            "pools in use": len(pools),
            "pools new since mark": len(new),
            "arenas opened since mark and still held": len(holding),
            "of these, held only by one kind of block": dict(only.most_common()),
            "of these, holding each kind of block": dict(within.most_common(25)),
            "arena contents (the first 8)": [
                dict(h.most_common(6)) for h in list(holding.values())[:8]
            ],
            "blocks in new pools": sum(by_size.values()),
            "by type": dict(by_type.most_common(30)),
            "by block size": dict(sorted(by_size.items())),
            "blocks not objects in the new arenas, by where allocated": dict(
                raw_sites.most_common(25)
            ),
            "samples": sampled,
        }


def _allocated_at(address: int) -> str:
    """Where the block at `address` was allocated, innermost frames last (while tracing)."""
    if not tracemalloc.is_tracing():
        return "(not tracing)"
    get = ctypes.pythonapi._PyTraceMalloc_GetTraceback  # noqa: SLF001
    get.restype, get.argtypes = ctypes.py_object, [ctypes.c_uint, ctypes.c_size_t]
    frames = get(0, address)
    if frames is None:
        return "(untraced: allocated before tracing started)"
    if not frames:
        return "(no Python frame: allocated from C code, e.g. the Temporal core's threads)"
    # frames from innermost; skip the library's own frames for the ones that name a caller
    return " < ".join(f"{f.rsplit('/', 1)[-1]}:{n}" for f, n in list(frames)[:5])


def _int_value(address: int) -> int:
    """The magnitude of the int object at `address` (its first digits; enough to tell addresses)."""
    size = abs(int.from_bytes(ctypes.string_at(address + 16, 8), "little", signed=True))
    digits = ctypes.string_at(address + 24, 4 * min(size, 3))
    return sum(
        int.from_bytes(digits[4 * k : 4 * k + 4], "little") << (30 * k) for k in range(min(size, 3))
    )


def _short(obj: object) -> str:
    try:
        return re.sub(r"\s+", " ", repr(obj))[:120]
    except Exception as exc:  # a half-built object's repr
        return f"<repr failed: {type(exc).__name__}>"


def _referrers(obj: object, depth: int = 3) -> list[str]:
    """One referrer per level, by type (a dict shows its first keys)."""
    chain: list[str] = []
    frame = sys._getframe()  # noqa: SLF001  # pyright: ignore[reportPrivateUsage]
    for _ in range(depth):
        found = [r for r in gc.get_referrers(obj) if r is not frame and not _is_probe(r)]
        if not found:
            chain.append("(no tracked referrer)")
            break
        obj = found[0]
        text = type(obj).__name__
        if isinstance(obj, dict):
            keys: list[object] = list(cast("dict[object, object]", obj))[:4]
            text += "{" + ", ".join(_short(k) for k in keys) + "}"
        chain.append(text[:160])
    return chain


def _is_probe(obj: object) -> bool:
    """Frames (this module's own, holding the object in a local)."""
    return type(obj).__name__ == "frame"
