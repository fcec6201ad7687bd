"""Operator command line: `python -m compaction_assets COMMAND ...` (or the `compaction` script).

Errors are one line on stderr and a non-zero exit; progress goes to stderr; results to stdout as JSON. The
commands are declared with click (cli/command_line.py) where their functions are written, one module for
each family in cli/commands/; what they share stays here (context.py: store, output, exit codes;
completion.py, encoding.py, follow.py, landing_area.py, prometheus.py). `main` parses a command line and
runs its command, reporting every error the same way.
"""

from __future__ import annotations

import os
import sys

import click

from compaction_assets import settings

# isort: off
# Each family module declares its commands into the `compaction` group on import: in this order, the order
# `compaction --help` lists them in (docs/cli.md's).
from compaction_assets.cli.commands import reading, cleaning, records, writing, landing  # noqa: F401
from compaction_assets.cli.commands import maintenance, forget, config, table, topic  # noqa: F401

# isort: on
from compaction_assets.cli.command_line import COMPACTION, Invocation, parse
from compaction_assets.cli.context import EXIT_PIPE_CLOSED, EXIT_TRANSIENT, settle_imports
from compaction_assets.errors import CompactionError, EngineError, first_line, os_error_message


def main(argv: list[str] | None = None, group: click.Group | None = None) -> int:
    """Run one command line (`argv`, the process's if None; parsed by `group`, the CLI's own unless given)
    and return its exit code: errors are one line on stderr and a non-zero exit code; --help exits 0 and a
    usage error 2, as click reports them."""
    try:
        parsed = parse(group or COMPACTION, argv)
        if not isinstance(parsed, Invocation):
            return parsed
        rc = parsed.run()
        sys.stdout.flush()  # a reader that went away (`| head`) is seen here, not at exit
        return rc
    except BrokenPipeError:
        return _stdout_closed()
    except EngineError as exc:
        print(f"error: {exc} (exit {EXIT_TRANSIENT}: transient, run again)", file=sys.stderr)
        return EXIT_TRANSIENT
    except CompactionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a path, a permission, a full disk: the user's machine, not the product's bug
        if settings.debug_enabled():
            raise
        print(f"error: {os_error_message(exc)}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, click.Abort):  # click turns an interruption while parsing into Abort
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # never a bare traceback for operators; details with COMPACTION_DEBUG=1
        if settings.debug_enabled():
            raise
        print(
            f"error: unexpected {type(exc).__name__}: {first_line(exc, None, blank='')} "
            "(set COMPACTION_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def run() -> int:
    """The `compaction` command's process: its imports settled (cli/context.settle_imports), then `main`."""
    settle_imports()
    return main()


def _stdout_closed() -> int:
    """The reader of stdout went away (`read LOG | head -1`): stop quietly, as `cat` does (exit 141 = 128 +
    SIGPIPE); stdout now points at /dev/null so that Python's flush at exit finds nothing to complain about."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE_CLOSED


if __name__ == "__main__":
    sys.exit(run())
