"""`durable_tools.storage`: the local-filesystem driver, its configuration, and hostile claims."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from durable_tools.codec import data_converter
from durable_tools.errors import ConfigurationError, StorageError
from durable_tools.storage import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_THRESHOLD,
    LOCAL_DRIVER_NAME,
    LocalFileStorageDriver,
    PayloadStorage,
    storage_from_options,
)
from durable_tools.worker.plugin import DurableToolsPlugin

STORE = StorageDriverStoreContext()
RETRIEVE = StorageDriverRetrieveContext()


def payload(data: bytes) -> Payload:
    return Payload(metadata={"encoding": b"binary/plain"}, data=data)


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


async def test_round_trip_names_the_file_by_the_sha256_of_the_payload(tmp_path: Path) -> None:
    driver = LocalFileStorageDriver(tmp_path)
    stored = payload(b"x" * 300_000)
    (claim,) = await driver.store(STORE, [stored])
    digest = hashlib.sha256(stored.SerializeToString(deterministic=True)).hexdigest()
    assert claim.claim_data == {"sha256": digest}
    assert files_under(tmp_path) == [tmp_path / "sha256" / digest[:2] / digest]
    assert await driver.retrieve(RETRIEVE, [claim]) == [stored]


async def test_storing_the_same_payload_again_writes_nothing(tmp_path: Path) -> None:
    driver = LocalFileStorageDriver(tmp_path)
    stored = payload(b"retry me")
    (first,) = await driver.store(STORE, [stored])
    (path,) = files_under(tmp_path)
    before = path.stat().st_mtime_ns
    os.utime(path, ns=(before - 10**9, before - 10**9))  # a rewrite would move it forward
    (second,) = await driver.store(STORE, [stored])
    assert second == first
    assert files_under(tmp_path) == [path]
    assert path.stat().st_mtime_ns == before - 10**9


async def test_a_truncated_object_is_written_again(tmp_path: Path) -> None:
    driver = LocalFileStorageDriver(tmp_path)
    stored = payload(b"y" * 1000)
    (claim,) = await driver.store(STORE, [stored])
    (path,) = files_under(tmp_path)
    path.write_bytes(path.read_bytes()[:10])  # e.g. a copy interrupted by hand
    with pytest.raises(StorageError, match="does not match its digest"):
        await driver.retrieve(RETRIEVE, [claim])
    await driver.store(STORE, [stored])
    assert await driver.retrieve(RETRIEVE, [claim]) == [stored]


async def test_concurrent_stores_of_one_payload_leave_one_whole_file(tmp_path: Path) -> None:
    driver = LocalFileStorageDriver(tmp_path)
    stored = payload(os.urandom(2_000_000))
    claims = await asyncio.gather(*(driver.store(STORE, [stored]) for _ in range(8)))
    assert len({c[0].claim_data["sha256"] for c in claims}) == 1
    (path,) = files_under(tmp_path)  # no temporary file left behind
    assert await driver.retrieve(RETRIEVE, claims[0]) == [stored]
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


async def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    driver = LocalFileStorageDriver(tmp_path)
    stored = payload(b"z" * 100)
    digest = hashlib.sha256(stored.SerializeToString(deterministic=True)).hexdigest()
    # The object's path is a directory: the rename fails after the write.
    (tmp_path / "sha256" / digest[:2] / digest).mkdir(parents=True)
    with pytest.raises(OSError):
        await driver.store(STORE, [stored])
    leftovers = [p for p in (tmp_path / "sha256" / digest[:2]).iterdir() if p.name != digest]
    assert leftovers == []


async def test_a_missing_object_names_the_digest_the_directory_and_the_option(
    tmp_path: Path,
) -> None:
    driver = LocalFileStorageDriver(tmp_path / "other")
    digest = "ab" * 32
    with pytest.raises(StorageError) as caught:
        await driver.retrieve(RETRIEVE, [StorageDriverClaim({"sha256": digest})])
    message = str(caught.value)
    assert f"sha256:{digest} is missing from {tmp_path / 'other'}" in message
    assert "--storage-dir" in message


async def test_a_fanout_directory_symlinked_outside_the_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = b"not yours"
    digest = hashlib.sha256(secret).hexdigest()
    (outside / digest).write_bytes(secret)
    root = tmp_path / "root"
    (root / "sha256").mkdir(parents=True)
    (root / "sha256" / digest[:2]).symlink_to(outside)
    driver = LocalFileStorageDriver(root)
    with pytest.raises(StorageError, match="outside"):
        await driver.retrieve(RETRIEVE, [StorageDriverClaim({"sha256": digest})])


@contextlib.contextmanager
def opened_paths() -> Iterator[list[str]]:
    """Record every path `open` is audited with on this thread while the block runs.

    The driver reads in a worker thread (`asyncio.to_thread`), so the hook
    records all threads but only while `recording` is set.
    """
    seen: list[str] = []
    recording.set()
    try:
        _sink.append(seen)
        yield seen
    finally:
        _sink.remove(seen)
        recording.clear()


recording = threading.Event()
_sink: list[list[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if recording.is_set() and event == "open" and args and isinstance(args[0], str | bytes):
        path = args[0] if isinstance(args[0], str) else os.fsdecode(args[0])
        for sink in _sink:
            sink.append(path)


sys.addaudithook(_audit)  # audit hooks cannot be removed; this one is inert when not recording

_HEX = "0123456789abcdef"
_claim_values = st.one_of(
    st.text(max_size=120),
    st.text(alphabet=_HEX + "ABCDEF./\\\n\x00", min_size=60, max_size=70),
    st.sampled_from(
        [
            "../../../../etc/passwd",
            "/etc/passwd",
            "a" * 64 + "\n",
            "A" * 64,
            "../" + "a" * 61,
            "a" * 63,
            "a" * 65,
            "",
        ]
    ),
)
_claims = st.dictionaries(
    st.one_of(st.just("sha256"), st.text(max_size=20)), _claim_values, max_size=4
)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(claim_data=_claims)
def test_a_hostile_claim_never_opens_a_file_outside_the_root(
    tmp_path: Path, claim_data: dict[str, str]
) -> None:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    driver = LocalFileStorageDriver(root)
    with opened_paths() as seen:
        with pytest.raises(StorageError):  # nothing is stored: every claim fails, cleanly
            asyncio.run(driver.retrieve(RETRIEVE, [StorageDriverClaim(claim_data)]))
    resolved_root = root.resolve()
    assert all(Path(p).resolve().is_relative_to(resolved_root) for p in seen), seen


def test_payload_storage_checks_its_sizes(tmp_path: Path) -> None:
    driver = LocalFileStorageDriver(tmp_path)
    with pytest.raises(ConfigurationError, match="threshold"):
        PayloadStorage(driver=driver, threshold=-1)
    with pytest.raises(ConfigurationError, match="maximum payload size"):
        PayloadStorage(driver=driver, max_payload_bytes=0)
    with pytest.raises(ConfigurationError, match="non-empty name"):
        LocalFileStorageDriver(tmp_path, name="")
    storage = PayloadStorage(driver=driver)
    assert (storage.threshold, storage.max_payload_bytes) == (256 * 1024, 64 * 1024 * 1024)
    assert (DEFAULT_THRESHOLD, DEFAULT_MAX_PAYLOAD_BYTES) == (262_144, 67_108_864)


def test_options_build_a_local_storage_or_none(tmp_path: Path) -> None:
    assert storage_from_options() is None
    storage = storage_from_options(directory=tmp_path, threshold=10, max_payload_bytes=99)
    assert storage is not None
    assert isinstance(storage.driver, LocalFileStorageDriver)
    assert storage.driver.root == tmp_path
    assert storage.driver.name() == LOCAL_DRIVER_NAME
    assert (storage.threshold, storage.max_payload_bytes) == (10, 99)
    with pytest.raises(ConfigurationError, match="not both"):
        storage_from_options(directory=tmp_path, s3_bucket="b")
    with pytest.raises(ConfigurationError, match="needs external storage"):
        storage_from_options(max_payload_bytes=5)


class _Reverse(PayloadCodec):
    async def encode(self, payloads: Any) -> list[Payload]:
        return [
            Payload(metadata={"encoding": b"reversed"}, data=p.SerializeToString()[::-1])
            for p in payloads
        ]

    async def decode(self, payloads: Any) -> list[Payload]:
        out: list[Payload] = []
        for p in payloads:
            decoded = Payload()
            decoded.ParseFromString(p.data[::-1])
            out.append(decoded)
        return out


async def test_the_codec_runs_before_storage_so_stored_objects_are_encoded(
    tmp_path: Path,
) -> None:
    storage = PayloadStorage(driver=LocalFileStorageDriver(tmp_path))
    converter = data_converter(_Reverse(), storage=storage)
    assert isinstance(converter.payload_codec, _Reverse)
    value = {"secret": "s" * 400_000}
    (reference,) = await converter.encode([value])
    assert reference.metadata["encoding"] == b"json/protobuf"  # a reference, not the value
    assert len(reference.SerializeToString()) < 1024
    (stored,) = files_under(tmp_path)
    kept = Payload()
    kept.ParseFromString(stored.read_bytes())
    assert kept.metadata["encoding"] == b"reversed"  # the codec's output was stored
    assert b'"secret"' not in stored.read_bytes()
    assert await converter.decode([reference], [dict[str, str]]) == [value]


async def test_small_payloads_stay_inline(tmp_path: Path) -> None:
    converter = data_converter(storage=PayloadStorage(driver=LocalFileStorageDriver(tmp_path)))
    (inline,) = await converter.encode(["x" * 1000])
    assert inline.metadata["encoding"] == b"json/plain"
    assert files_under(tmp_path) == []


def test_the_plugin_keeps_the_clients_codec_and_failure_converter(tmp_path: Path) -> None:
    storage = PayloadStorage(driver=LocalFileStorageDriver(tmp_path), max_payload_bytes=12345)
    plugin = DurableToolsPlugin(toolkits={}, models={}, storage=storage)
    codec = _Reverse()
    given_converter = DataConverter(
        payload_codec=codec, failure_converter_class=DefaultFailureConverterWithEncodedAttributes
    )
    converter = plugin._data_converter(given_converter)  # pyright: ignore[reportPrivateUsage]
    assert converter.payload_codec is codec
    assert converter.failure_converter_class is DefaultFailureConverterWithEncodedAttributes
    assert converter.external_storage is not None
    assert converter.external_storage.drivers == [storage.driver]
    assert converter.external_storage.payload_size_threshold == DEFAULT_THRESHOLD
    assert plugin.agent_activities.max_payload_bytes == 12345
    without = DurableToolsPlugin(toolkits={}, models={})
    assert without.agent_activities.max_payload_bytes is None
    # The client's own external storage is kept when the plugin has none.
    kept = without._data_converter(converter)  # pyright: ignore[reportPrivateUsage]
    assert kept.external_storage is converter.external_storage


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 (a real S3 API over HTTP), configured by environment."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for name, value in {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    try:
        yield endpoint
    finally:
        server.stop()


async def test_an_s3_bucket_from_the_options_stores_large_payloads(s3_endpoint: str) -> None:
    import aioboto3
    from temporalio.contrib.aws.s3driver import S3StorageDriver

    session: Any = aioboto3.Session()
    async with session.client("s3") as s3:
        await s3.create_bucket(Bucket="payloads")
    storage = storage_from_options(s3_bucket="payloads", max_payload_bytes=1_000_000)
    assert storage is not None
    assert isinstance(storage.driver, S3StorageDriver)
    assert storage.driver._max_payload_size == 4_000_000  # pyright: ignore[reportPrivateUsage]
    converter = data_converter(storage=storage)
    value = {"big": "b" * 500_000}
    try:
        (reference,) = await converter.encode([value])
        assert len(reference.SerializeToString()) < 1024
        async with session.client("s3") as s3:
            listed = await s3.list_objects_v2(Bucket="payloads")
        (key,) = [o["Key"] for o in listed["Contents"]]
        assert key.startswith("v0/d/sha256/")
        assert await converter.decode([reference], [dict[str, str]]) == [value]
    finally:
        await storage.aclose()


async def test_the_plugins_converter_raises_on_a_missing_object_when_decoding(
    tmp_path: Path,
) -> None:
    """Clients and activation decoding both raise on a failed fetch: no verdict from I/O.

    While an activation is decoded, the raise fails the workflow task, which
    Temporal retries (durable_tools.references); only references refused from
    their shape become unreadable payloads.
    """
    from durable_tools.references import UNREADABLE_ENCODING, GuardedDataConverter

    storage = PayloadStorage(driver=LocalFileStorageDriver(tmp_path), threshold=10)
    converter = DurableToolsPlugin(toolkits={}, models={}, storage=storage)._data_converter(  # pyright: ignore[reportPrivateUsage]
        None
    )
    assert isinstance(converter, GuardedDataConverter)
    (reference,) = await converter.encode(["x" * 100])
    for stored in files_under(tmp_path):
        stored.unlink()
    with pytest.raises(StorageError, match="is missing from"):
        await converter.decode([reference], [str])
    # What a workflow activation's decoding does (the SDK's visitor step).
    with pytest.raises(StorageError, match="fetching an external payload failed.*is missing from"):
        await converter._external_retrieve_payload_sequence([reference])  # pyright: ignore[reportPrivateUsage]
    forged = Payload()
    forged.CopyFrom(reference)
    forged.data = reference.data.replace(b'"sha256"', b'"sha512"')
    (substitute,) = await converter._external_retrieve_payload_sequence([forged])  # pyright: ignore[reportPrivateUsage]
    assert substitute.metadata["encoding"] == UNREADABLE_ENCODING
    assert b"a local-file claim has the one entry 'sha256'" in substitute.data
