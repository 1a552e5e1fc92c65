"""deploy/, checked as far as this machine allows (no Docker engine, no cluster).

The Dockerfile is linted with hadolint, the compose file validated against the
Compose specification's schema (check-jsonschema's vendored copy), the
Kubernetes manifests with kubernetes-validate; then the commands the
containers run (the image's CMD and HEALTHCHECK, the compose services', the
Kubernetes Deployment's and Job's) run here, read from those files, with
their environment, against a real dev server started without durable-tools'
search attributes: the setup job registers them (twice: it is idempotent),
the worker starts polling, its health check passes, and SIGTERM stops it
gracefully.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from durable_tools.worker.allocator import find_jemalloc
from durable_tools.worker.dev_server import DevServer

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name
    assert found.exists(), f"{name} is missing: `make install` installs it (the dev extra)"
    return str(found)


def test_dockerfile_passes_hadolint() -> None:
    ran = subprocess.run(
        [_tool("hadolint"), "--no-color", str(DEPLOY / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_compose_file_matches_the_compose_specification() -> None:
    ran = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec"]
        + [str(DEPLOY / "compose.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_kubernetes_manifests_validate() -> None:
    manifests = sorted(str(p) for p in (DEPLOY / "k8s").glob("*.yaml"))
    assert len(manifests) >= 2
    ran = subprocess.run(
        [_tool("kubernetes-validate"), "--strict", *manifests],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr


def _dockerfile() -> tuple[dict[str, str], list[str], list[str]]:
    """The runtime stage's ENV, CMD and HEALTHCHECK command (exec forms)."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    runtime = text.split("\nFROM ")[-1]
    env: dict[str, str] = {}
    for line in runtime.splitlines():
        if line.startswith("ENV "):
            env.update(dict(re.findall(r"(\w+)=(\S+)", line)))
    cmd = yaml.safe_load(re.search(r"^CMD (\[.*\])$", runtime, re.M).group(1))  # type: ignore[union-attr]
    health = yaml.safe_load(re.search(r"HEALTHCHECK .*? CMD (\[.*\])", runtime).group(1))  # type: ignore[union-attr]
    return env, cmd, health


def _compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]


def _k8s(name: str) -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "k8s" / name).read_text())


def _unescape_compose(text: str) -> str:
    return text.replace("$$", "$")


# One decision key, as an operator would make it (head -c 32 /dev/urandom | base64).
DECISION_KEY = "k1:" + base64.b64encode(bytes(range(32))).decode()


def _compose_environment(service: dict[str, Any], shell: dict[str, str]) -> dict[str, str]:
    """A service's `environment`, with `${NAME:-default}` and `${NAME:?error}` taken
    from `shell` as Compose does (a `:?` variable missing from `shell` is an error)."""

    def value(match: re.Match[str]) -> str:
        name, kind, text = match.group(1), match.group(2), match.group(3)
        if kind == ":?":
            assert shell.get(name), f"compose stops: {text}"
            return shell[name]
        return shell.get(name) or text or ""

    return {
        name: re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", value, str(text))
        for name, text in service["environment"].items()
    }


def _container_env(container: dict[str, Any], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """A container's `env`, with `secretKeyRef`s read from `secrets` (name -> key -> value)."""
    env: dict[str, str] = {}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        ref = entry["valueFrom"]["secretKeyRef"]
        found = secrets.get(ref["name"], {}).get(ref["key"])
        assert found is not None or ref.get("optional"), ref
        if found is not None:
            env[entry["name"]] = found
    return env


DECISION_SECRETS = {"durable-tools-decision-keys": {"worker": DECISION_KEY, "inbox": DECISION_KEY}}

# The inbox's CSRF secret, as an operator would make it.
CSRF_SECRET = base64.b64encode(bytes(range(100, 132))).decode()
INBOX_SECRETS = {**DECISION_SECRETS, "durable-tools-inbox": {"csrf-secret": CSRF_SECRET}}


@pytest.fixture(scope="module")
def bare_server() -> Iterator[DevServer]:
    """A dev server without durable-tools' search attributes (as a new cluster has)."""
    import asyncio

    server = DevServer(search_attributes={}, headless=True)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(server.start())
    try:
        yield server
    finally:
        loop.run_until_complete(server.stop())
        loop.close()


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "DURABLE_TOOLS_", "PYTHONPATH"))
    }
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", NO_COLOR="1", **extra)
    return env


def _search_attributes(server: DevServer) -> str:
    return subprocess.run(
        [_tool("temporal"), "operator", "search-attribute", "list", "--address", server.address],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def test_setup_job_registers_search_attributes_idempotently(bare_server: DevServer) -> None:
    job = _k8s("search-attributes-job.yaml")["spec"]["template"]["spec"]["containers"][0]
    setup = _compose()["setup"]
    # Compose runs the same script as the Kubernetes Job.
    assert [_unescape_compose(part) for part in setup["command"]] == job["command"]
    env = {e["name"]: e["value"] for e in job["env"]}
    env["TEMPORAL_ADDRESS"] = bare_server.address
    assert "DurableToolsPendingCount" not in _search_attributes(bare_server)
    for _ in range(2):
        ran = subprocess.run(
            job["command"], env=_env(**env), capture_output=True, text=True, timeout=120
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
    listed = _search_attributes(bare_server)
    assert re.search(r"DurableToolsPendingCount\s+Int", listed), listed
    assert re.search(r"DurableToolsPendingKinds\s+KeywordList", listed), listed
    assert re.search(r"DurableToolsTeam\s+Keyword", listed), listed


def _register_search_attributes(server: DevServer) -> None:
    """Run the setup Job's script (the worker refuses to start without the attributes)."""
    subprocess.run(
        _k8s("search-attributes-job.yaml")["spec"]["template"]["spec"]["containers"][0]["command"],
        env=_env(TEMPORAL_ADDRESS=server.address, TEMPORAL_NAMESPACE="default"),
        check=True,
        capture_output=True,
        timeout=120,
    )


def _run_worker(
    command: list[str], env: dict[str, str], health: list[str], health_file: Path
) -> str:
    """Start `command`, wait until it polls, check `health`, SIGTERM it, check it stopped.

    Returns:
        What the worker printed.
    """
    unhealthy = subprocess.run(health, env=_env(**env), capture_output=True, text=True, timeout=60)
    assert unhealthy.returncode == 1 and "does not exist" in unhealthy.stderr
    log = health_file.with_suffix(".log")
    with log.open("w") as out:
        worker = subprocess.Popen(
            command, env=_env(**env), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while "worker polling" not in log.read_text():
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        deadline = time.monotonic() + 20
        while not health_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        healthy = subprocess.run(
            health, env=_env(**env), capture_output=True, text=True, timeout=60
        )
        assert healthy.returncode == 0, healthy.stdout + healthy.stderr
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
        assert "worker stopped" in log.read_text()
        assert not health_file.exists()
        return log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_image_command_and_health_check(bare_server: DevServer, tmp_path: Path) -> None:
    env, cmd, health = _dockerfile()
    assert _compose()["worker"]["command"] == cmd  # compose runs the image's command
    assert env["DURABLE_TOOLS_ADDRESS"] and env["DURABLE_TOOLS_HEALTH_FILE"]
    health_file = tmp_path / "image.health"
    # As compose runs it: the image's environment, then the service's, with the
    # operator's decision key from the shell.
    env.update(
        _compose_environment(_compose()["worker"], {"DURABLE_TOOLS_DECISION_KEYS": DECISION_KEY})
    )
    env.update(
        DURABLE_TOOLS_ADDRESS=bare_server.address, DURABLE_TOOLS_HEALTH_FILE=str(health_file)
    )
    _register_search_attributes(bare_server)
    printed = _run_worker(cmd, env, health, health_file)
    assert "decisions checked with key(s) k1" in printed, printed
    # The image installs libjemalloc2 and the worker starts itself again on it
    # (allocator.py); here, as there, when the system has it (`make test` installs it).
    on = "jemalloc" if find_jemalloc() else "system"
    assert f"memory allocator {on}" in printed, printed
    assert "libjemalloc2" in (DEPLOY / "Dockerfile").read_text()
    # The process is only this worker: what it started with is frozen (heap_return.py).
    assert re.search(r"garbage collector: [1-9][\d,]* startup objects frozen", printed), printed


def test_kubernetes_worker_command_runs_versioned(bare_server: DevServer, tmp_path: Path) -> None:
    container = _k8s("worker-deployment.yaml")["spec"]["template"]["spec"]["containers"][0]
    env = _container_env(container, DECISION_SECRETS)
    assert env["DURABLE_TOOLS_DEPLOYMENT"] and env["DURABLE_TOOLS_BUILD_ID"]
    health_file = tmp_path / "k8s.health"
    env.update(
        DURABLE_TOOLS_ADDRESS=bare_server.address, DURABLE_TOOLS_HEALTH_FILE=str(health_file)
    )
    _register_search_attributes(bare_server)
    command = container["command"] + container["args"]
    probe = container["livenessProbe"]["exec"]["command"]
    printed = _run_worker(command, env, probe, health_file)
    assert "decisions checked with key(s) k1" in printed, printed
    # It served as its Worker Deployment version.
    listed = subprocess.run(
        [_tool("temporal"), "worker", "deployment", "list", "--address", bare_server.address],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert env["DURABLE_TOOLS_DEPLOYMENT"] in listed, listed


def _serve_inbox(command: list[str], env: dict[str, str], port: int, log: Path) -> Any:
    """Start an inbox command (its --port replaced by `port`); wait until it answers."""
    import urllib.request

    args = list(command)
    args[args.index("--port") + 1] = str(port)
    with log.open("w") as out:
        inbox = subprocess.Popen(
            args, env=_env(**env), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 60
    while True:
        assert inbox.poll() is None, log.read_text()
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/openapi.json", timeout=2)
            return inbox
        except OSError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _stop(process: Any) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_inbox_commands_serve_with_their_auth(bare_server: DevServer, tmp_path: Path) -> None:
    from durable_tools.worker.dev_server import free_port

    # compose: a tokens file mounted as a secret, and an HTTP health check.
    service = _compose()["inbox"]
    secret = (
        DEPLOY
        / yaml.safe_load((DEPLOY / "compose.yaml").read_text())["secrets"]["inbox_tokens"]["file"]
    ).resolve()
    command = [
        str(secret) if part == "/run/secrets/inbox_tokens" else part for part in service["command"]
    ]
    shell = {
        "DURABLE_TOOLS_INBOX_DECISION_KEY": DECISION_KEY,
        "DURABLE_TOOLS_INBOX_SECRET": CSRF_SECRET,
    }
    env = {**_compose_environment(service, shell), "DURABLE_TOOLS_ADDRESS": bare_server.address}
    assert env["DURABLE_TOOLS_INBOX_SECRET"] == CSRF_SECRET
    port = free_port()
    inbox = _serve_inbox(command, env, port, tmp_path / "compose-inbox.log")
    try:
        base = f"http://127.0.0.1:{port}"
        assert _status(f"{base}/api/session") == 401
        name, token = secret.read_text().splitlines()[-1].split(":")[:2]
        assert _status(f"{base}/api/session", {"Authorization": f"Bearer {token}"}) == 200
        check = [part.replace(":8234/", f":{port}/") for part in service["healthcheck"]["test"][1:]]
        assert subprocess.run(check, env=_env(), timeout=30).returncode == 0
    finally:
        _stop(inbox)
    printed = (tmp_path / "compose-inbox.log").read_text()
    assert "decisions signed with key k1" in printed, printed

    # Kubernetes: behind its oauth2-proxy sidecar, on 127.0.0.1, probed from inside.
    container = _k8s_container("inbox")
    env = _container_env(container, INBOX_SECRETS)
    env["DURABLE_TOOLS_ADDRESS"] = bare_server.address
    port = free_port()
    inbox = _serve_inbox(
        container["command"] + container["args"], env, port, tmp_path / "k8s-inbox.log"
    )
    try:
        base = f"http://127.0.0.1:{port}"
        probe = [
            part.replace(":8234/", f":{port}/")
            for part in container["readinessProbe"]["exec"]["command"]
        ]
        assert subprocess.run(probe, env=_env(), timeout=30).returncode == 0
        assert _status(f"{base}/api/session") == 401
        # The sidecar reaches it from 127.0.0.1, the one trusted proxy address.
        assert _status(f"{base}/api/session", {"X-Forwarded-User": "ana"}) == 200
    finally:
        _stop(inbox)
    printed = (tmp_path / "k8s-inbox.log").read_text()
    assert "decisions signed with key k1" in printed, printed


def _k8s_inbox() -> dict[str, dict[str, Any]]:
    """The inbox manifest's resources by kind."""
    found = yaml.safe_load_all((DEPLOY / "k8s" / "inbox.yaml").read_text())
    return {d["kind"]: d for d in found}


def _k8s_container(name: str) -> dict[str, Any]:
    containers = _k8s_inbox()["Deployment"]["spec"]["template"]["spec"]["containers"]
    (found,) = [c for c in containers if c["name"] == name]
    return found


def _option(args: list[str], name: str) -> str:
    """The value of `--name VALUE` or `--name=VALUE` in `args`."""
    for index, arg in enumerate(args):
        if arg == name:
            return args[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} not in {args}")


def test_kubernetes_inbox_runs_behind_its_proxy_sidecar_with_a_network_policy() -> None:
    """Issue 23, item 3: identity headers can come only from the proxy in the pod."""
    resources = _k8s_inbox()
    proxy, inbox = _k8s_container("oauth2-proxy"), _k8s_container("inbox")
    # oauth2-proxy, at a pinned release, forwarding to the inbox on loopback.
    image, _, tag = proxy["image"].partition(":")
    assert image == "quay.io/oauth2-proxy/oauth2-proxy"
    assert re.fullmatch(r"v\d+\.\d+\.\d+", tag), tag
    assert _option(proxy["args"], "--upstream") == "http://127.0.0.1:8234/"
    assert _option(proxy["args"], "--skip-auth-strip-headers") == "true"
    (proxy_port,) = proxy["ports"]
    # The inbox binds 127.0.0.1 and trusts identity headers from 127.0.0.1 only.
    args = inbox["args"]
    assert _option(args, "--host") == "127.0.0.1" and _option(args, "--port") == "8234"
    assert "--trust-proxy-header" in args
    assert _option(args, "--trusted-proxy") == "127.0.0.1/32"
    assert "ports" not in inbox
    # Every replica gets the one CSRF secret from the Secret.
    (secret,) = [e for e in inbox["env"] if e["name"] == "DURABLE_TOOLS_INBOX_SECRET"]
    ref = secret["valueFrom"]["secretKeyRef"]
    assert ref["name"] and ref["key"] and not ref.get("optional")
    assert resources["Deployment"]["spec"]["replicas"] >= 2
    # The Service and the NetworkPolicy let in the proxy's port, nothing else.
    assert resources["Service"]["spec"]["ports"][0]["targetPort"] == proxy_port["name"]
    policy = resources["NetworkPolicy"]["spec"]
    labels = resources["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    allowed = [port["port"] for rule in policy["ingress"] for port in rule["ports"]]
    assert allowed == [proxy_port["containerPort"]]


def test_compose_inbox_sets_the_csrf_secret() -> None:
    environment = _compose()["inbox"]["environment"]
    assert str(environment["DURABLE_TOOLS_INBOX_SECRET"]).startswith(
        "${DURABLE_TOOLS_INBOX_SECRET:?"
    )  # compose refuses to start it without one
    with pytest.raises(AssertionError, match="compose stops"):
        _compose_environment(_compose()["inbox"], {})
