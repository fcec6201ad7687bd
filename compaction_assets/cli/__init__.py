"""Operator command line: `python -m compaction_assets COMMAND ...` (or the `compaction` script).

Errors are one line on stderr and a non-zero exit; progress goes to stderr; results to stdout as JSON. The
commands are declared with click where their functions are written, one module for each family in
cli/commands/; what they share stays in cli/ (context.py: store, output, exit codes; completion.py,
encoding.py, follow.py, landing_area.py, prometheus.py).

This module is the command line itself: the `compaction` group, the global options every command and group
accepts (--store, --topics, --now, before the command and after it), and `command`, the decorator that
declares a `cmd_` function as a command where the function is written (its click.argument and click.option
decorators under it). Parsing ends at an `Invocation`, which `main` runs, so every error of a command is
reported the one way `main` says, never by click.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import click

from compaction_assets import settings
from compaction_assets.cli.context import EXIT_PIPE_CLOSED, EXIT_TRANSIENT, Context, settle_imports
from compaction_assets.errors import CompactionError, EngineError, first_line, os_error_message

Handler = Callable[[Context], int]
PROG = "compaction"
GLOBAL_OPTIONS = ("store", "topics", "now")


def _global_options() -> list[click.Parameter]:
    """--store, --topics, --now: fresh objects for each command and group that accepts them (default None:
    a value given nearer the command wins over one given before it, see `_arguments`)."""
    return [
        click.Option(
            ["--store"],
            metavar="DIR",
            help="log store root (env COMPACTION_STORE; default var/store under the current directory)",
        ),
        click.Option(
            ["--topics"],
            metavar="FILE",
            help="the deployment's topics file: stored in the store when its content changed since it was last "
            "applied; the stored configuration is what runs; env COMPACTION_TOPICS",
        ),
        click.Option(
            ["--now"], type=int, metavar="MS", help="evaluate at this time (ms since epoch) instead of the clock"
        ),
    ]


class DeclaredOrderGroup(click.Group):
    """A group whose --help lists its commands in the order they were declared (grouped by family, as
    docs/cli.md lists them), not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


def examples(*lines: str) -> str | None:
    """Command lines shown under `Examples:` at the end of a command's --help (click's epilog, kept as
    written: `\b` stops click from joining the lines)."""
    if not lines:
        return None
    title = "Example:" if len(lines) == 1 else "Examples:"
    return "\b\n" + title + "\n" + "\n".join(f"  {PROG} {line}" for line in lines)


def command_group(
    name: str, help: str, parent: click.Group | None = None, example: tuple[str, ...] = ()
) -> click.Group:
    """A group of commands with the global options (added to `parent` when given). Without arguments it is a
    usage error (`Missing command.`, exit 2), as for an unknown command. `example`: command lines its --help
    ends with (after `compaction`)."""
    group = DeclaredOrderGroup(
        name,
        params=_global_options(),
        help=help,
        short_help=help,
        epilog=examples(*example),
        no_args_is_help=False,
        # -h as well as --help, as the command line always took; every command's context inherits it
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    if parent is not None:
        parent.add_command(group)
    return group


@dataclass(frozen=True)
class Invocation:
    """A parsed command line: the function of the command it names and that command's arguments."""

    handler: Handler
    arguments: SimpleNamespace

    def run(self) -> int:
        return self.handler(Context(self.arguments))


def command(group: click.Group, name: str, help: str, example: tuple[str, ...] = ()) -> Callable[[Handler], Handler]:
    """Declare the decorated `cmd_` function as `group`'s command `name`, with the global options and the
    parameters of the click.argument and click.option decorators under this one; the function itself is
    returned unchanged (it takes the command's Context, its arguments in `ctx.args`). `example`: command
    lines (after `compaction`) its --help ends with; every command has at least one."""

    def declare(handler: Handler) -> Handler:
        # click's decorators collect the parameters bottom-up; the command lists them top-down
        own = list(reversed(getattr(handler, "__click_params__", [])))

        def parsed(**_values: object) -> Invocation:
            return Invocation(handler, _arguments(click.get_current_context()))

        group.add_command(
            click.Command(
                name,
                params=[*_global_options(), *own],
                callback=parsed,
                help=help,
                short_help=help,
                epilog=examples(*example),
            )
        )
        return handler

    return declare


def runnable_group(
    parent: click.Group, name: str, help: str, example: tuple[str, ...] = ()
) -> Callable[[Handler], click.Group]:
    """Declare the decorated `cmd_` function as `parent`'s command `name` that also has sub-commands (as
    `metrics` and `metrics serve`): the function runs when no sub-command is named, with the parameters of
    the click decorators under this one; the group is returned, for its sub-commands. `example`: as
    `command`'s."""

    def declare(handler: Handler) -> click.Group:
        own = list(reversed(getattr(handler, "__click_params__", [])))

        def parsed(**_values: object) -> Invocation | None:
            ctx = click.get_current_context()
            return Invocation(handler, _arguments(ctx)) if ctx.invoked_subcommand is None else None

        group = DeclaredOrderGroup(
            name,
            params=[*_global_options(), *own],
            callback=parsed,
            help=help,
            short_help=help,
            invoke_without_command=True,
            context_settings={"help_option_names": ["-h", "--help"]},
            epilog=examples(*example),
        )
        parent.add_command(group)
        return group

    return declare


def _arguments(ctx: click.Context) -> SimpleNamespace:
    """The command's arguments as its function reads them: its own parameters (a list for each nargs=-1
    one), each global option from the command or else from the nearest group before it that was given it,
    and `command`, the name of the top-level command (`config` for `config set`)."""
    chain = [ctx]
    while chain[-1].parent is not None:
        chain.append(chain[-1].parent)
    values = {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in ctx.params.items()
        if key not in GLOBAL_OPTIONS
    }
    for option in GLOBAL_OPTIONS:
        values[option] = next((c.params[option] for c in chain if c.params.get(option) is not None), None)
    top = chain[-2] if len(chain) > 1 else ctx
    return SimpleNamespace(**values, command=top.info_name)


def parse(group: click.Group, argv: list[str] | None) -> Invocation | int:
    """What the command line `argv` (None: the process's) asks for: the command to run, or the exit code of
    a command line that runs none: 0 after --help, 2 after a usage error (shown on stderr by click). Shell
    completion (`_COMPACTION_COMPLETE` set) is answered by click, which exits the process."""
    try:
        return group.main(argv, prog_name=PROG, standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code


# The `compaction` command line; the command modules (imported below) declare their commands into it.
COMPACTION = command_group(
    PROG,
    "Operator command line: `python -m compaction_assets COMMAND ...` (or the `compaction` script).",
    example=("logs", "clean --all", "COMMAND --help"),
)


# the opt-out of the table commit of every command that changes a log (cli/follow.py)
NO_TABLE = click.option(
    "--no-table",
    is_flag=True,
    help="leave the topic's table behind (a bulk load); the next command or run that commits it catches up",
)


# isort: off
# Each family module declares its commands into the `compaction` group on import (so after the group and
# `command` above): in this order, the order `compaction --help` lists them in (docs/cli.md's).
from compaction_assets.cli.commands import reading, cleaning, records, writing, landing  # noqa: E402, F401
from compaction_assets.cli.commands import maintenance, forget, config, table, topic  # noqa: E402, F401

# isort: on


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
