"""`decode_input`: raw handler inputs to a model or a reason, never an exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_tools.approvals import Decision
from durable_tools.conversation import Resume, SendMessage
from durable_tools.handler_input import MAX_REASON_CHARS, Undecodable, clean_text, decode_input

CONVERTER = pydantic_data_converter.payload_converter


def raw(encoding: str | None, data: bytes = b"", **metadata: bytes) -> RawValue:
    meta = dict(metadata)
    if encoding is not None:
        meta["encoding"] = encoding.encode()
    return RawValue(Payload(metadata=meta, data=data))


def json_raw(value: object) -> RawValue:
    return raw("json/plain", json.dumps(value).encode())


DECISION = {"call_id": "r1", "approved": True, "arguments_hash": "h", "decided_by": "ana"}


def test_one_json_input_decodes_as_the_sdk_would() -> None:
    payload = CONVERTER.to_payload(Decision(**DECISION))
    assert decode_input([RawValue(payload)], Decision, CONVERTER) == Decision(**DECISION)


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ([], "no input; expected one Decision"),
        ([json_raw(DECISION), json_raw(DECISION)], "2 inputs; expected one Decision"),
        ([raw("binary/plain", b"yes")], "payload encoding 'binary/plain' is not JSON"),
        ([raw("binary/null")], "payload encoding 'binary/null' is not JSON"),
        ([raw("json/protobuf", b"{}")], "cannot decode the 'json/protobuf' payload"),
        ([raw("garbage/x", b"\xff")], "cannot decode the 'garbage/x' payload"),
        ([raw(None, b"{}")], "cannot decode the '<none>' payload"),
        ([raw("json/plain", b"{not json")], "cannot decode the 'json/plain' payload"),
        ([raw("json/plain", b'"\\ud800"')], "cannot decode the 'json/plain' payload"),
        ([json_raw([1, 2])], "cannot decode the 'json/plain' payload as Decision"),
        ([json_raw({"call_id": 5})], "call_id: Input should be a valid string"),
    ],
)
def test_what_cannot_be_decoded_says_why(args: list[RawValue], reason: str) -> None:
    decoded = decode_input(args, Decision, CONVERTER)
    assert isinstance(decoded, Undecodable)
    assert reason in decoded.reason


def test_an_undecodable_json_object_keeps_the_call_id_and_sender_it_names() -> None:
    decoded = decode_input([json_raw({"call_id": "r9", "decided_by": "bo"})], Decision, CONVERTER)
    assert isinstance(decoded, Undecodable)
    assert (decoded.call_id, decoded.sent_by) == ("r9", "bo")
    assert "approved: Field required" in decoded.reason


def test_a_default_stands_for_no_input_and_null() -> None:
    assert decode_input([], Resume, CONVERTER, default=Resume()) == Resume()
    assert decode_input([raw("binary/null")], Resume, CONVERTER, default=Resume()) == Resume()
    assert decode_input([json_raw(None)], Resume, CONVERTER, default=Resume()) == Resume()
    # Without a default, the same inputs are undecodable.
    assert isinstance(decode_input([], Resume, CONVERTER), Undecodable)


def test_clean_text_replaces_lone_surrogates_and_cuts() -> None:
    assert clean_text("a\ud800b") == "a?b"
    long = clean_text("x" * 10_000)
    assert len(long) == MAX_REASON_CHARS and long.endswith("…")
    clean_text("\ud800" * 10_000).encode("utf-8")  # encodes


@settings(max_examples=200, deadline=None)
@given(
    args=st.lists(
        st.builds(
            raw,
            st.none() | st.sampled_from(["json/plain", "binary/plain", "binary/null"]) | st.text(),
            st.binary(max_size=40) | st.text().map(lambda t: t.encode("utf-8", "surrogatepass")),
        ),
        max_size=3,
    )
)
def test_decode_input_never_raises_and_its_reasons_encode(args: list[RawValue]) -> None:
    decoded = decode_input(args, SendMessage, CONVERTER)
    if isinstance(decoded, Undecodable):
        (decoded.reason + decoded.call_id + decoded.sent_by).encode("utf-8")
        assert len(decoded.reason) <= MAX_REASON_CHARS
    else:
        CONVERTER.to_payload(decoded)
