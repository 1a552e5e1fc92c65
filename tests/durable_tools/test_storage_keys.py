"""`durable_tools.storage_keys` and the activation decoding of `durable_tools.references`.

What a worker does with a reference while it decodes an activation is decided
from the reference alone: refused references become the same unreadable
payload on every replay without any read; a reference it fetches and cannot
read fails the decoding (the workflow task, retried), never a verdict
(DESIGN.md, invariant 10).
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from storage_support import KEYS, KEYS_ENV, FlakyDriver
from temporalio.api.common.v1 import Payload
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext

from durable_tools.codec import data_converter
from durable_tools.errors import ConfigurationError, StorageError
from durable_tools.references import UNREADABLE_ENCODING, GuardedDataConverter, guarded
from durable_tools.storage import LOCAL_DRIVER_NAME, LocalFileStorageDriver, PayloadStorage
from durable_tools.storage_keys import (
    MAC_CLAIM_KEY,
    STORAGE_KEYS_ENV,
    SignedStorageDriver,
    claim_mac,
    storage_keys_from_environment,
)

REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"
OTHER_KEY = b"o" * 32


def reference(driver: str, claim: dict[str, str]) -> Payload:
    """A reference payload as the SDK writes one (or as a client could forge one)."""
    data = json.dumps({"driverName": driver, "claimData": claim}).encode()
    return Payload(
        metadata={"encoding": b"json/protobuf", "messageType": REFERENCE_TYPE}, data=data
    )


def claim_of(ref: Payload) -> dict[str, str]:
    return dict(json.loads(ref.data)["claimData"])


def worker_converter(storage: PayloadStorage) -> GuardedDataConverter:
    converter = guarded(data_converter(storage=storage))
    assert isinstance(converter, GuardedDataConverter)
    return converter


async def decode_activation(converter: GuardedDataConverter, payloads: list[Payload]) -> Any:
    """What the SDK's activation visitor calls for a signal's inputs."""
    return await converter._external_retrieve_payload_sequence(payloads)  # pyright: ignore[reportPrivateUsage]


async def test_stored_claims_carry_a_mac_and_read_back(tmp_path: Path) -> None:
    storage = PayloadStorage(driver=LocalFileStorageDriver(tmp_path), keys=KEYS, threshold=10)
    converter = data_converter(storage=storage)
    (ref,) = await converter.encode(["x" * 100])
    claim = claim_of(ref)
    assert set(claim) == {"sha256", MAC_CLAIM_KEY}
    mac = claim_mac(KEYS["s1"], LOCAL_DRIVER_NAME, {"sha256": claim["sha256"]})
    assert claim[MAC_CLAIM_KEY] == f"v1:s1:{mac}"
    assert await converter.decode([ref], [str]) == ["x" * 100]
    assert "references signed with storage key s1 (accepted: s1)" in storage.describe()


async def test_rotation_reads_old_references_and_refuses_retired_keys(tmp_path: Path) -> None:
    old = PayloadStorage(driver=LocalFileStorageDriver(tmp_path), keys=KEYS, threshold=10)
    (ref,) = await data_converter(storage=old).encode(["old" * 50])
    rotated = PayloadStorage(
        driver=LocalFileStorageDriver(tmp_path),
        keys={"s1": KEYS["s1"], "s2": OTHER_KEY},
        signing_key_id="s2",
        threshold=10,
    )
    assert rotated.key_ids == ("s2", "s1")
    converter = data_converter(storage=rotated)
    assert await converter.decode([ref], [str]) == ["old" * 50]
    (new_ref,) = await converter.encode(["new" * 50])
    assert claim_of(new_ref)[MAC_CLAIM_KEY].startswith("v1:s2:")
    retired = PayloadStorage(
        driver=LocalFileStorageDriver(tmp_path), keys={"s2": OTHER_KEY}, threshold=10
    )
    with pytest.raises(StorageError, match="storage key 's1', which is not held here"):
        await data_converter(storage=retired).decode([ref], [str])


def test_keys_come_from_the_environment_and_bad_ones_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two = f"s2:{base64.b64encode(OTHER_KEY).decode()},{KEYS_ENV}"
    assert storage_keys_from_environment({STORAGE_KEYS_ENV: two}) == {"s2": OTHER_KEY, **KEYS}
    assert storage_keys_from_environment({}) == {}
    monkeypatch.setenv(STORAGE_KEYS_ENV, two)
    storage = PayloadStorage(driver=LocalFileStorageDriver(tmp_path))
    assert storage.key_ids == ("s2", "s1")
    assert isinstance(storage.external_storage().drivers[0], SignedStorageDriver)
    assert PayloadStorage(driver=LocalFileStorageDriver(tmp_path), keys={}).key_ids == ()
    for bad in ("s1", "s1:not base64!", ":" + base64.b64encode(OTHER_KEY).decode()):
        with pytest.raises(ConfigurationError, match="KEY_ID:BASE64"):
            storage_keys_from_environment({STORAGE_KEYS_ENV: bad})
    with pytest.raises(ConfigurationError, match="at least 16"):
        storage_keys_from_environment(
            {STORAGE_KEYS_ENV: "s1:" + base64.b64encode(b"short").decode()}
        )
    driver = LocalFileStorageDriver(tmp_path)
    with pytest.raises(ConfigurationError, match="not one of the keys"):
        PayloadStorage(driver=driver, keys=KEYS, signing_key_id="s9")
    with pytest.raises(ConfigurationError, match="needs storage keys"):
        PayloadStorage(driver=driver, keys={}, accept_unsigned_references=True)


@pytest.mark.parametrize("keys", [KEYS, {}], ids=["with keys", "without keys"])
async def test_a_failed_fetch_while_decoding_an_activation_raises(
    tmp_path: Path, keys: dict[str, bytes]
) -> None:
    """Storage down: the decoding fails (the workflow task is retried), no unreadable payload."""
    flaky = FlakyDriver(tmp_path)
    storage = PayloadStorage(driver=flaky, keys=keys, threshold=10)
    converter = worker_converter(storage)
    (ref,) = await converter.encode(["m" * 300])
    flaky.fail_next(2)
    for _ in range(2):  # each attempt of the workflow task
        with pytest.raises(StorageError, match="503 Slow Down.*retried until storage answers"):
            await decode_activation(converter, [ref])
    (fetched,) = await decode_activation(converter, [ref])
    assert converter.payload_converter.from_payload(fetched, str) == "m" * 300
    # A missing object is a failed fetch too: the task waits for it to come back.
    for stored in tmp_path.rglob("*"):
        if stored.is_file():
            stored.unlink()
    with pytest.raises(StorageError, match="is missing from"):
        await decode_activation(converter, [ref])


async def test_unsigned_references_can_be_accepted_while_keys_are_turned_on(
    tmp_path: Path,
) -> None:
    before = PayloadStorage(driver=LocalFileStorageDriver(tmp_path), keys={}, threshold=10)
    (unsigned,) = await data_converter(storage=before).encode(["u" * 100])
    during = PayloadStorage(
        driver=LocalFileStorageDriver(tmp_path),
        keys=KEYS,
        accept_unsigned_references=True,
        threshold=10,
    )
    (fetched,) = await decode_activation(worker_converter(during), [unsigned])
    assert fetched.metadata["encoding"] == b"json/plain"
    after = PayloadStorage(driver=LocalFileStorageDriver(tmp_path), keys=KEYS, threshold=10)
    (refused,) = await decode_activation(worker_converter(after), [unsigned])
    assert refused.metadata["encoding"] == UNREADABLE_ENCODING
    assert b"carries no storage MAC" in refused.data


# ------------------------------------------------- hostile references, by shape

_HEX = "0123456789abcdef"
_digests = st.one_of(
    st.text(alphabet=_HEX, min_size=64, max_size=64),
    st.text(max_size=80),
    st.sampled_from(["../../../../etc/passwd", "A" * 64, "a" * 63, ""]),
)
_macs = st.one_of(
    st.builds(lambda k, h: f"v1:{k}:{h}", st.sampled_from(["s1", "s2", "x"]), _digests),
    st.text(max_size=90),
)


@st.composite
def _hostile(draw: st.DrawFn) -> tuple[str, dict[str, str], str]:
    """A reference a client could forge: (driver name, claim, what makes it hostile)."""
    kind = draw(st.sampled_from(["forged mac", "no mac", "bad claim", "unknown driver"]))
    digest = draw(st.text(alphabet=_HEX, min_size=64, max_size=64))
    if kind == "forged mac":
        return LOCAL_DRIVER_NAME, {"sha256": digest, MAC_CLAIM_KEY: draw(_macs)}, kind
    if kind == "no mac":
        extra = draw(st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=2))
        return LOCAL_DRIVER_NAME, {**extra, "sha256": digest}, kind
    if kind == "bad claim":
        claim = draw(
            st.dictionaries(
                st.one_of(st.just("sha256"), st.text(max_size=12)), _digests, max_size=3
            ).filter(lambda c: set(c) != {"sha256"} or len(c["sha256"]) != 64)
        )
        return LOCAL_DRIVER_NAME, claim, kind
    name = draw(st.text(max_size=30).filter(lambda n: n != LOCAL_DRIVER_NAME))
    return name, {"sha256": digest, MAC_CLAIM_KEY: draw(_macs)}, kind


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(hostile=_hostile(), keyed=st.booleans())
def test_hostile_references_are_refused_the_same_way_every_time_without_io(
    tmp_path: Path, hostile: tuple[str, dict[str, str], str], keyed: bool
) -> None:
    driver_name, claim, kind = hostile
    # Without keys a well-formed unsigned claim is fetched (the next test); a
    # claim with a MAC entry is not of the local driver's shape, so refused.
    assume(keyed or kind != "no mac" or set(claim) != {"sha256"})
    flaky = FlakyDriver(tmp_path)
    storage = PayloadStorage(driver=flaky, keys=KEYS if keyed else {}, threshold=10)
    converter = worker_converter(storage)
    payload = reference(driver_name, claim)
    first = asyncio.run(decode_activation(converter, [payload]))
    flaky.fail_next(1_000)  # storage down: a verdict that read storage would change
    second = asyncio.run(decode_activation(converter, [payload]))
    assert flaky.retrieves == 0, (kind, claim)
    assert [p.metadata["encoding"] for p in first] == [UNREADABLE_ENCODING]
    assert first == second


async def test_a_well_formed_unsigned_claim_is_fetched_without_keys(tmp_path: Path) -> None:
    """Without keys the local driver's claims are content addressed: fetched, checked by sha256."""
    flaky = FlakyDriver(tmp_path)
    converter = worker_converter(PayloadStorage(driver=flaky, keys={}, threshold=10))
    flaky.fail_next(1)
    with pytest.raises(StorageError, match="503"):
        await decode_activation(converter, [reference(LOCAL_DRIVER_NAME, {"sha256": "ab" * 32})])
    with pytest.raises(StorageError, match="is missing from"):
        await decode_activation(converter, [reference(LOCAL_DRIVER_NAME, {"sha256": "ab" * 32})])
    assert flaky.retrieves == 2


async def test_a_batch_fetches_what_it_may_and_refuses_the_rest(tmp_path: Path) -> None:
    flaky = FlakyDriver(tmp_path)
    converter = worker_converter(PayloadStorage(driver=flaky, keys=KEYS, threshold=10))
    (good,) = await converter.encode(["g" * 100])
    forged = reference(LOCAL_DRIVER_NAME, {**claim_of(good), MAC_CLAIM_KEY: "v1:s1:" + "0" * 64})
    small = Payload(metadata={"encoding": b"json/plain"}, data=b'"small"')
    out = await decode_activation(converter, [forged, good, small])
    assert [p.metadata["encoding"] for p in out] == [
        UNREADABLE_ENCODING,
        b"json/plain",
        b"json/plain",
    ]
    assert out[0].data == b"refused external storage claim: the storage MAC under key 's1' " + (
        b"does not match the claim"
    )
    assert converter.payload_converter.from_payload(out[1], str) == "g" * 100
    assert out[2] == small


async def test_a_signed_driver_refuses_a_forged_claim_before_reading(tmp_path: Path) -> None:
    flaky = FlakyDriver(tmp_path)
    signed = SignedStorageDriver(flaky, KEYS)
    forged = StorageDriverClaim({"sha256": "ab" * 32, MAC_CLAIM_KEY: "v1:s1:" + "1" * 64})
    with pytest.raises(StorageError, match="does not match"):
        await signed.retrieve(StorageDriverRetrieveContext(), [forged])
    assert flaky.retrieves == 0
