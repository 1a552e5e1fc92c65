"""The worker's memory allocator (durable_tools/worker/allocator.py; issue 26, item 4).

`environment` composes the variables a worker's interpreter is started again
with; `reexec` does it in a real process (same process id, on jemalloc); and
the property the choice is for, measured in real processes: after a burst of
small objects of which a few outlive it, jemalloc as configured hands back
most of the pages, where the interpreter's own allocator keeps them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, cast

import pytest
from agent_support import MODELS, TOOLKITS
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from durable_tools.worker import allocator
from durable_tools.worker.cli import app

JEMALLOC = allocator.find_jemalloc()
needs_jemalloc = pytest.mark.skipif(
    JEMALLOC is None, reason="no jemalloc library here (apt install libjemalloc2; make test does)"
)


@pytest.fixture
def found(monkeypatch: pytest.MonkeyPatch) -> None:
    """A system with jemalloc, in a process running on the system's allocator."""
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: "libjemalloc.so.2")
    monkeypatch.setattr(allocator, "in_use", lambda: "system")


@pytest.mark.usefixtures("found")
def test_environment_preloads_jemalloc_first_and_keeps_the_rest() -> None:
    env = allocator.environment("auto", {"LD_PRELOAD": "libmine.so", "PATH": "/bin"})
    assert env is not None
    assert env["LD_PRELOAD"] == "libjemalloc.so.2 libmine.so"
    assert env["PYTHONMALLOC"] == "malloc"
    assert env["MALLOC_CONF"] == allocator.JEMALLOC_CONF
    assert env["PATH"] == "/bin"
    # An operator's own jemalloc configuration wins.
    mine = allocator.environment("jemalloc", {"MALLOC_CONF": "narenas:2"})
    assert mine is not None and mine["MALLOC_CONF"] == "narenas:2"
    assert mine["LD_PRELOAD"] == "libjemalloc.so.2"
    # Started again once: never again (no loop when the preload did not take).
    assert allocator.environment("auto", env) is None
    assert allocator.environment("jemalloc", env) is None


@pytest.mark.usefixtures("found")
def test_system_keeps_the_interpreters_allocator() -> None:
    assert allocator.environment("system", {}) is None
    with pytest.raises(ValueError, match="auto, jemalloc or system"):
        allocator.environment("tcmalloc", {})  # pyright: ignore[reportArgumentType]


def test_without_the_library_auto_goes_on_and_jemalloc_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: None)
    monkeypatch.setattr(allocator, "in_use", lambda: "system")
    assert allocator.environment("auto", {}) is None
    with pytest.raises(allocator.AllocatorUnavailable, match="libjemalloc2"):
        allocator.environment("jemalloc", {})


def test_already_on_jemalloc_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: "libjemalloc.so.2")
    monkeypatch.setattr(allocator, "in_use", lambda: "jemalloc")
    assert allocator.environment("jemalloc", {}) is None


def test_cli_refuses_an_unknown_allocator_in_one_line() -> None:
    result = CliRunner().invoke(app, ["worker", "--allocator", "tcmalloc"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --allocator must be auto, jemalloc or system, not 'tcmalloc'"
    ]


def test_the_cli_called_in_process_never_replaces_its_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host (here pytest, through CliRunner) is not started again, whatever it asks."""
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: "libjemalloc.so.2")
    monkeypatch.setattr(allocator, "in_use", lambda: "system")

    def execve(*args: object) -> None:
        raise AssertionError(f"the test process would have been replaced: {args}")

    monkeypatch.setattr(allocator.os, "execve", execve)
    assert not allocator.is_command()
    result = CliRunner().invoke(
        app, ["worker", "--app", "examples.support:app", "--address", "127.0.0.1:1"]
    )
    assert "replaced" not in result.output, result.output
    assert result.exit_code not in (0, None), result.output  # it went on, to fail to connect
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output


_REEXEC = textwrap.dedent(
    """
    import os, sys
    from durable_tools.worker import allocator
    print("image", os.getpid(), allocator.in_use(), flush=True)
    allocator.as_command()  # as the console script
    allocator.reexec(sys.argv[1])
    cached = allocator.cache_this_thread(), allocator.flush_this_thread()
    print("running", os.getpid(), allocator.in_use(), os.environ.get("PYTHONMALLOC"), *cached)
    """
)


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    ran = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


@needs_jemalloc
def test_reexec_runs_the_same_process_on_jemalloc() -> None:
    lines = _python(_REEXEC, "auto").splitlines()
    first, second, last = (line.split() for line in lines)
    assert first[2] == "system" and second[2] == "jemalloc", lines
    assert first[1] == second[1] == last[1], lines  # one process id throughout
    assert last[2:] == ["jemalloc", "malloc", "True", "True"], lines  # a thread cache: mallctl
    assert allocator.in_use() == "system"  # this process was never touched


def test_reexec_system_stays() -> None:
    lines = _python(_REEXEC, "system").splitlines()
    assert [line.split()[0] for line in lines] == ["image", "running"], lines
    assert lines[1].split()[2:] == ["system", "None", "False", "False"], lines


_BURST = textwrap.dedent(
    """
    import gc, json, sys, time
    from durable_tools.worker import allocator
    from durable_tools.worker.heap_return import return_freed

    def rss_mb():
        with open("/proc/self/status") as status:
            line = next(x for x in status if x.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024

    allocator.cache_this_thread()  # as the worker's loop thread (HeapReturn.run)
    gc.collect()
    start = rss_mb()
    burst = [bytes(range(i % 200, i % 200 + 56)) * 8 for i in range(400_000)]  # ~200 MB
    survivors = burst[::250]  # a few outlive the burst, spread through it
    peak = rss_mb()
    del burst
    gc.collect()
    allocator.flush_this_thread()  # as HeapReturn.check
    return_freed()
    # The purge can find jemalloc's background thread at work (a loaded run
    # kept everything): wait past its decay (dirty_decay_ms 1000, JEMALLOC_CONF)
    # until RSS stops falling, at most five decays.
    after, deadline = rss_mb(), time.monotonic() + 5.0
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = rss_mb()
        if now >= after and time.monotonic() > deadline - 3.75:
            break
        after = min(after, now)
    print(json.dumps({"allocator": allocator.in_use(), "start": start, "peak": peak,
                      "after": after, "survivors": len(survivors)}))
    """
)


@needs_jemalloc
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_after_a_burst_jemalloc_hands_back_what_the_system_allocator_keeps() -> None:
    """The measurement `allocator.py` chose jemalloc's configuration by, in miniature."""
    runs = {}
    for choice in ("system", "auto"):
        code = "import sys\nfrom durable_tools.worker import allocator\n"
        code += f"allocator.reexec({choice!r})\n" + _BURST
        runs[choice] = json.loads(_python(code).splitlines()[-1])
    system, jemalloc = runs["system"], runs["auto"]
    assert (system["allocator"], jemalloc["allocator"]) == ("system", "jemalloc")

    def kept(run: dict[str, float]) -> float:
        """The share of what the burst took that stayed after it."""
        return (run["after"] - run["start"]) / (run["peak"] - run["start"])

    assert jemalloc["peak"] - jemalloc["start"] > 100  # the burst really took memory
    assert kept(jemalloc) < 0.35, runs
    assert kept(system) > 2 * kept(jemalloc), runs  # what the choice is for


_SURVIVORS = textwrap.dedent(
    """
    import ctypes, gc, json, os, sys
    from durable_tools.worker import allocator

    allocator.reexec("auto")
    mallctl = ctypes.CDLL(None).mallctl

    def active():
        # Bytes in pages jemalloc counts as in use (a slab with one live region is).
        epoch, value = ctypes.c_uint64(1), ctypes.c_size_t(0)
        size = ctypes.c_size_t(ctypes.sizeof(value))
        mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.c_size_t(8))
        mallctl(b"stats.active", ctypes.byref(value), ctypes.byref(size), None, ctypes.c_size_t(0))
        return value.value

    gc.collect()
    start = active()
    # 80-byte regions (a 47-byte `bytes`): jemalloc's own slab for them is 5
    # pages of 256; one in 256 outlives the burst, as a burst's survivors do.
    burst = [bytes(range(i % 200, i % 200 + 47)) for i in range(256 * 2_000)]
    survivors = burst[::256]
    del burst
    gc.collect()
    print(json.dumps({"kept": active() - start, "survivors": len(survivors),
                      "conf": os.environ.get("MALLOC_CONF")}))
    """
)


@needs_jemalloc
def test_a_bursts_survivors_keep_a_page_each_not_a_slab() -> None:
    """`JEMALLOC_CONF`'s one-page slabs: what 2,000 survivors keep, against jemalloc's slabs."""
    own_slabs = allocator.JEMALLOC_CONF.replace(",slab_sizes:1-4096:1", "")
    assert own_slabs != allocator.JEMALLOC_CONF
    runs = {}
    for name, conf in (("worker", None), ("own slabs", own_slabs)):
        env = {k: v for k, v in os.environ.items() if k != "MALLOC_CONF"}
        if conf is not None:
            env["MALLOC_CONF"] = conf  # kept by `allocator.environment`
        runs[name] = json.loads(_python(_SURVIVORS, env=env).splitlines()[-1])
    assert runs["worker"]["conf"] == allocator.JEMALLOC_CONF, runs
    # 2,000 survivors: about a page each (8 MB) against a 5-page slab each (40 MB).
    assert runs["worker"]["kept"] < 12 << 20, runs
    assert runs["own slabs"]["kept"] > 3 * runs["worker"]["kept"], runs


_POOL = textwrap.dedent(
    """
    import ctypes, json, sys
    from durable_tools.worker import allocator

    allocator.reexec(sys.argv[1])
    mallctl = ctypes.CDLL(None).mallctl if allocator.in_use() == "jemalloc" else None

    def cached_bytes():
        # Bytes in every thread's cache, all arenas (jemalloc's own count).
        if mallctl is None:
            return None
        epoch, value = ctypes.c_uint64(1), ctypes.c_size_t(0)
        size = ctypes.c_size_t(ctypes.sizeof(value))
        mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.c_size_t(8))
        mallctl(b"stats.arenas.4096.tcache_bytes", ctypes.byref(value), ctypes.byref(size),
                None, ctypes.c_size_t(0))
        return value.value

    def activation(n):
        # Like a workflow activation: many short-lived objects.
        kept = [bytes(range(i % 200, i % 200 + 40)) for i in range(n)]
        del kept[::2]
        del kept
        return cached_bytes()

    with allocator.ThreadCacheExecutor(max_workers=4) as pool:
        during = [f.result() for f in [pool.submit(activation, 20_000) for _ in range(8)]]
        after = cached_bytes()
    print(json.dumps({"allocator": allocator.in_use(), "during": during, "after": after}))
    """
)


@needs_jemalloc
def test_workflow_threads_cache_while_they_work_and_keep_nothing_after() -> None:
    """`ThreadCacheExecutor`: each task allocates through a thread cache, emptied when it ends."""
    run = json.loads(_python(_POOL, "auto").splitlines()[-1])
    assert run["allocator"] == "jemalloc", run
    assert all(cached > 0 for cached in run["during"]), run  # the task's thread had a cache
    assert run["after"] == 0, run  # the pool's idle threads hold nothing


def test_the_thread_cache_pool_is_a_plain_pool_on_the_system_allocator() -> None:
    run = json.loads(_python(_POOL, "system").splitlines()[-1])
    assert run == {"allocator": "system", "during": [None] * 8, "after": None}


def test_the_plugin_runs_workflow_tasks_on_the_thread_cache_pool_on_jemalloc(
    dev_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sized as the SDK sizes its own executor; an application's own executor is kept."""
    from concurrent.futures import ThreadPoolExecutor

    from temporalio.worker import WorkerConfig

    from durable_tools.worker.plugin import DurableToolsPlugin

    def config(**given: Any) -> WorkerConfig:
        # As `Worker` passes it: with its client (the plugin's interceptors,
        # tracing when set up, read the client's own).
        return cast("WorkerConfig", {"client": dev_env.client, "task_queue": "q", **given})

    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS)
    assert "workflow_task_executor" not in plugin.configure_worker(config())
    monkeypatch.setattr(allocator, "in_use", lambda: "jemalloc")
    sized = plugin.configure_worker(config(max_concurrent_workflow_tasks=7))
    default = plugin.configure_worker(config())
    pools = [sized.get("workflow_task_executor"), default.get("workflow_task_executor")]
    assert all(isinstance(p, allocator.ThreadCacheExecutor) for p in pools), pools
    assert [p._max_workers for p in pools] == [7, 500]  # pyright: ignore[reportOptionalMemberAccess,reportAttributeAccessIssue]
    with ThreadPoolExecutor(max_workers=3) as mine:
        given = plugin.configure_worker(config(workflow_task_executor=mine))
        assert given.get("workflow_task_executor") is mine


async def test_the_plugin_stops_the_pool_it_made_with_the_worker(
    dev_env: WorkflowEnvironment, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker

    from durable_tools.worker.plugin import DurableToolsPlugin

    monkeypatch.setattr(allocator, "in_use", lambda: "jemalloc")
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS, search_attributes=False)
    client = await Client.connect(
        dev_env.client.service_client.config.target_host, plugins=[plugin]
    )
    worker = Worker(client, task_queue=task_queue)
    pool = worker.config(active_config=True).get("workflow_task_executor")
    assert isinstance(pool, allocator.ThreadCacheExecutor)
    async with worker:
        assert not pool._shutdown  # pyright: ignore[reportPrivateUsage]
    assert pool._shutdown  # pyright: ignore[reportPrivateUsage]
    assert not plugin._executors  # pyright: ignore[reportPrivateUsage]
