"""Schemas for tool parameters, outputs and answers: pydantic types or raw JSON Schema.

Every schema is compiled once, when its tool is built: a pydantic type into a
`TypeAdapter`, a raw JSON Schema into a `jsonschema.Draft202012Validator` with
format checking on. Validation errors are reported with their JSON path, so a
model can fix its arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import jsonschema
from jsonschema import FormatChecker
from jsonschema import exceptions as jsonschema_exceptions
from jsonschema.exceptions import ValidationError as JsonSchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for  # pyright: ignore[reportUnknownVariableType]
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from durable_tools.errors import InvalidSchema

__all__ = ["Schema", "SchemaViolation", "compile_schema"]

_MAX_REPORTED_ERRORS = 5


class SchemaViolation(ValueError):
    """A value does not satisfy a schema; the message lists JSON paths and messages."""


def _path(parts: Any) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _pydantic_message(exc: PydanticError) -> str:
    return "; ".join(
        f"{_path(err['loc'])}: {err['msg']}"
        for err in exc.errors(include_url=False)[:_MAX_REPORTED_ERRORS]
    )


@dataclass(frozen=True, eq=False)
class Schema:
    """A compiled schema: its JSON Schema document and a validator.

    Build one with `compile_schema`.

    Attributes:
        json_schema: The JSON Schema (draft 2020-12) document. For a raw schema
            it is exactly the dict given; for a pydantic type it is
            `TypeAdapter.json_schema()`.
        python_type: The pydantic type, or `None` for a raw JSON Schema.
        adapter: The compiled `TypeAdapter`, or `None`.
        validator: The compiled `jsonschema` validator, or `None`.
    """

    json_schema: dict[str, Any]
    python_type: Any = None
    adapter: TypeAdapter[Any] | None = field(default=None, repr=False)
    validator: Validator | None = field(default=None, repr=False)

    @property
    def is_raw(self) -> bool:
        """Whether this is a raw JSON Schema (no pydantic type)."""
        return self.adapter is None

    def validate(self, value: Any) -> Any:
        """Validate (and, for pydantic types, decode) a JSON value.

        Args:
            value: A JSON-compatible value.

        Returns:
            The decoded value: an instance of the pydantic type, or `value`
            itself for a raw JSON Schema.

        Raises:
            SchemaViolation: The value does not satisfy the schema; the message
                gives up to 5 violations as `JSON path: message`.
        """
        if self.adapter is not None:
            try:
                return self.adapter.validate_python(value)
            except PydanticError as exc:
                raise SchemaViolation(_pydantic_message(exc)) from None
        assert self.validator is not None
        errors: list[JsonSchemaError] = sorted(
            self.validator.iter_errors(value), key=lambda e: (len(e.absolute_path), e.message)
        )
        if errors:
            # best_match is unannotated in jsonschema; it returns one of `errors`.
            best = cast(
                JsonSchemaError,
                jsonschema_exceptions.best_match(errors),  # pyright: ignore[reportUnknownMemberType]
            )
            ordered = [best, *[e for e in errors if e is not best]][:_MAX_REPORTED_ERRORS]
            raise SchemaViolation("; ".join(f"{e.json_path}: {e.message}" for e in ordered))
        return value

    def encode(self, value: Any) -> Any:
        """Validate a Python value and encode it to JSON-compatible data.

        Args:
            value: A value of the schema's type (or JSON data for raw schemas).

        Returns:
            JSON-compatible data (dicts, lists, strings, numbers, booleans, None).

        Raises:
            SchemaViolation: The value does not satisfy the schema, or cannot be
                encoded to JSON (e.g. an arbitrary object under a raw schema).
        """
        try:
            if self.adapter is not None:
                checked = self.adapter.validate_python(value)
                return self.adapter.dump_python(checked, mode="json")
            data = to_jsonable_python(value)
        except PydanticError as exc:
            raise SchemaViolation(_pydantic_message(exc)) from None
        except (PydanticSerializationError, ValueError, TypeError) as exc:
            # Unserializable values (arbitrary objects, circular references).
            raise SchemaViolation(f"the value is not JSON-compatible: {exc}") from None
        self.validate(data)
        return data


def _dialect_name(dialect: type[Validator]) -> str:
    """`draft 2020-12`, `draft 7`, ... for error messages."""
    name = dialect.__name__.removeprefix("Draft").removesuffix("Validator")
    return f"draft {name[:4]}-{name[4:]}" if len(name) == 6 else f"draft {name}"


def compile_schema(
    spec: Any, *, what: str = "schema", format_checker: FormatChecker | None = None
) -> Schema:
    """Compile a pydantic type or a raw JSON Schema dict.

    Args:
        spec: A JSON Schema dict (draft 2020-12), a pydantic model class, or
            any type pydantic accepts (`list[str]`, a dataclass, `int`, …).
        what: What the schema describes, for error messages.
        format_checker: Checks `format` in a raw schema; `None` (default):
            the dialect's default checker, whose checks depend on the optional
            packages installed. Workflow code passes
            `durable_tools.formats.STDLIB_FORMAT_CHECKER`.

    Returns:
        A compiled `Schema`.

    Raises:
        InvalidSchema: A raw schema fails its dialect's `check_schema` (draft
            2020-12 unless `$schema` names another draft),
            or pydantic cannot build a schema for the type.
    """
    if isinstance(spec, Mapping):
        raw: dict[str, Any] = dict(cast(Mapping[str, Any], spec))
        # Draft 2020-12 unless `$schema` names another dialect (MCP servers
        # often send draft-07); the MCP spec makes 2020-12 the default.
        dialect: type[Validator] = validator_for(raw, default=jsonschema.Draft202012Validator)
        try:
            dialect.check_schema(raw)
        except jsonschema.SchemaError as exc:
            raise InvalidSchema(
                f"the {what} is not a valid JSON Schema ({_dialect_name(dialect)}): "
                f"{exc.message} at {_path(exc.absolute_path)}"
            ) from None
        validator = dialect(
            raw, format_checker=dialect.FORMAT_CHECKER if format_checker is None else format_checker
        )
        return Schema(json_schema=raw, validator=validator)
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(spec)
        document = adapter.json_schema()
    except Exception as exc:  # pydantic raises several unrelated types here
        raise InvalidSchema(f"cannot build a JSON Schema for the {what} {spec!r}: {exc}") from exc
    return Schema(json_schema=document, python_type=spec, adapter=adapter)
