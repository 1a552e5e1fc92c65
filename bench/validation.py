"""Argument validation: a validator compiled once versus `jsonschema.validate` per call.

durable-tools compiles each tool's JSON Schema once, when the tool is built
(`durable_tools.schema.compile_schema`), and reuses the validator for every
call. `jsonschema.validate(instance, schema)` checks the schema against its
metaschema and builds a new validator on every call. This prints both times
for the same instances, measured in one run, and their ratio (the machine is
shared and noisy, so only the ratio within one run means anything).

Usage:
    python bench/validation.py            # 100,000 validations each
    python bench/validation.py --n 5000   # a quicker run
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import jsonschema

from durable_tools.schema import compile_schema

# A moderately nested tool schema: objects in arrays in objects, a $ref,
# enums, formats and bounds, like a typical "create order" tool.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "^cus_[a-z0-9]{6,}$"},
                "email": {"type": "string", "format": "email"},
                "tier": {"enum": ["free", "pro", "enterprise"]},
            },
            "required": ["id", "email"],
            "additionalProperties": False,
        },
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 50,
            "items": {"$ref": "#/$defs/Item"},
        },
        "shipping": {
            "type": "object",
            "properties": {
                "address": {
                    "type": "object",
                    "properties": {
                        "street": {"type": "string", "minLength": 1},
                        "city": {"type": "string"},
                        "country": {"type": "string", "minLength": 2, "maxLength": 2},
                    },
                    "required": ["street", "city", "country"],
                },
                "express": {"type": "boolean"},
            },
            "required": ["address"],
        },
        "note": {"type": ["string", "null"], "maxLength": 500},
    },
    "required": ["customer", "items"],
    "additionalProperties": False,
    "$defs": {
        "Item": {
            "type": "object",
            "properties": {
                "sku": {"type": "string"},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
                "price": {"type": "number", "exclusiveMinimum": 0},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            },
            "required": ["sku", "quantity"],
            "additionalProperties": False,
        }
    },
}

INSTANCE: dict[str, Any] = {
    "customer": {"id": "cus_abc123", "email": "ada@example.com", "tier": "pro"},
    "items": [
        {"sku": "BOOK-1", "quantity": 2, "price": 12.5, "tags": ["paper", "gift"]},
        {"sku": "PEN-9", "quantity": 10, "price": 1.2},
        {"sku": "BAG-3", "quantity": 1, "tags": []},
    ],
    "shipping": {
        "address": {"street": "1 Main St", "city": "Oslo", "country": "NO"},
        "express": True,
    },
    "note": None,
}


def time_compiled(n: int) -> float:
    schema = compile_schema(SCHEMA)  # once, as when a tool is built
    start = time.perf_counter()
    for _ in range(n):
        schema.validate(INSTANCE)
    return time.perf_counter() - start


def time_per_call(n: int) -> float:
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    start = time.perf_counter()
    for _ in range(n):
        jsonschema.validate(
            INSTANCE, SCHEMA, cls=jsonschema.Draft202012Validator, format_checker=checker
        )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="validations per method")
    args = parser.parse_args()
    n: int = args.n

    # Both must agree before timing means anything.
    compile_schema(SCHEMA).validate(INSTANCE)
    jsonschema.validate(INSTANCE, SCHEMA, cls=jsonschema.Draft202012Validator)

    compiled = time_compiled(n)
    per_call = time_per_call(n)
    print(f"validations per method: {n:,}")
    print(
        f"compiled once (compile_schema(...).validate): {compiled:8.3f} s "
        f"({compiled / n * 1e6:7.1f} us/call)"
    )
    print(
        f"per call (jsonschema.validate):               {per_call:8.3f} s "
        f"({per_call / n * 1e6:7.1f} us/call)"
    )
    print(f"ratio per-call / compiled: {per_call / compiled:.1f}x")


if __name__ == "__main__":
    main()
