"""The `durable-tools` console script: the CLI, or one line naming the missing extra.

The command is installed with the distribution, but its libraries (typer,
rich) are the optional `cli` extra; without them `durable-tools` prints
`error: the durable-tools command needs the 'cli' extra: pip install
'durable-tools[cli]'` on stderr and exits 2, instead of a traceback.
"""

from __future__ import annotations

import sys

from durable_tools.worker.extras import missing_extra

__all__ = ["main"]


def main() -> None:
    """Run the CLI (`durable_tools.worker.cli.app`), or exit 2 if the `cli` extra is missing."""
    missing = missing_extra("the durable-tools command", "cli")
    if missing is not None:
        print(f"error: {missing}", file=sys.stderr)
        raise SystemExit(2)
    from durable_tools.worker import allocator
    from durable_tools.worker.cli import app

    allocator.as_command()  # `worker` may start this process again on jemalloc
    app()


if __name__ == "__main__":
    main()
