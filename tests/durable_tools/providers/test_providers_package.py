import importlib
import subprocess
import sys

import durable_tools.providers as providers

MODULES = ["anthropic", "openai_chat", "openai_responses"]


def test_all_is_complete_and_sorted() -> None:
    assert providers.__all__ == sorted(providers.__all__) == MODULES


def test_every_module_has_the_same_three_functions() -> None:
    for name in MODULES:
        module = importlib.import_module(f"durable_tools.providers.{name}")
        for function in ("parse_response", "render_tools", "render_transcript"):
            assert callable(getattr(module, function)), f"{name}.{function}"
            assert function in module.__all__


def test_import_pulls_in_only_the_standard_library() -> None:
    # No HTTP client, no provider SDK: the modules run in the workflow sandbox.
    code = (
        "import sys, durable_tools; before = set(sys.modules); "
        "import durable_tools.providers; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(new - set(sys.stdlib_module_names) - {'durable_tools'}))"
    )

    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == "[]"
