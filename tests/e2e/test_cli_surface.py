"""The command line's surface, pinned: every command, sub-command and parameter of `compaction` (its flags,
kind, nargs, required, default, type, metavar and help, as click holds them), walked from the click group and
compared with the committed tests/e2e/cli_surface.json, so that a change of a declaration that changes what
an operator types or reads is seen and named. A deliberate change regenerates the file:
`UPDATE_CLI_SURFACE=1 .venv/bin/python -m pytest tests/e2e/test_cli_surface.py`, and the diff of
cli_surface.json goes to review with it. Both entry points answer `--help`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click

from compaction_assets import cli
from compaction_assets.cli import COMPACTION

GOLDEN = Path(__file__).with_name("cli_surface.json")
UPDATE_ENV = "UPDATE_CLI_SURFACE"
REGENERATE = f"{UPDATE_ENV}=1 .venv/bin/python -m pytest tests/e2e/test_cli_surface.py"
REPO = Path(__file__).resolve().parents[2]


def _jsonable(value: object) -> object:
    """A default as JSON holds it: click's "no default" as None, another object by its name or repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if repr(value) == "Sentinel.UNSET":  # click's own "not given", not a public name
        return None
    return getattr(value, "__name__", repr(value))


def _parameter(ctx: click.Context, param: click.Parameter) -> dict[str, object]:
    """One option or positional argument: what click exposes of it."""
    return {
        "kind": param.param_type_name,
        "flags": [*param.opts, *param.secondary_opts] if isinstance(param, click.Option) else [],
        "is_flag": isinstance(param, click.Option) and param.is_flag,
        "nargs": param.nargs,
        "multiple": param.multiple,
        "required": param.required,
        "default": _jsonable(param.get_default(ctx, call=False)),
        "type": param.type.name,
        "metavar": None if isinstance(param, click.Option) and param.is_flag else param.make_metavar(ctx),
        "help": getattr(param, "help", None),
    }


def _command(command: click.Command, ctx: click.Context) -> dict[str, object]:
    """A command's surface: its path, help, listing help and examples (epilog), its options (by flags), its
    positionals (in order) and, for a group, its sub-commands (in the order --help lists them) and whether one
    is required."""
    surface: dict[str, object] = {
        "path": ctx.command_path,
        "help": command.help,
        "short_help": command.short_help,
        "examples": command.epilog,
    }
    options: dict[str, object] = {}
    positionals: list[object] = []
    for param in command.get_params(ctx):  # with the help option, as --help lists them
        if isinstance(param, click.Option):
            options[", ".join(param.opts)] = _parameter(ctx, param)
        else:
            positionals.append({"name": param.name, **_parameter(ctx, param)})
    surface["options"] = options
    surface["positionals"] = positionals
    if isinstance(command, click.Group):
        surface["subcommand_required"] = not command.invoke_without_command
        subcommands = {}
        for name in command.list_commands(ctx):
            sub = command.commands[name]
            subcommands[name] = _command(sub, click.Context(sub, info_name=name, parent=ctx, **sub.context_settings))
        surface["subcommands"] = subcommands
    return surface


def cli_surface() -> dict[str, object]:
    """The whole command line's surface, from today's declarations."""
    return _command(COMPACTION, click.Context(COMPACTION, info_name="compaction", **COMPACTION.context_settings))


def _differences(expected: object, actual: object, path: str = "") -> list[str]:
    """Every place where `actual` differs from `expected`, as `path: expected -> actual` lines."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        found = []
        for key in list(expected) + [k for k in actual if k not in expected]:
            where = f"{path}.{key}" if path else str(key)
            if key not in actual:
                found.append(f"{where}: removed")
            elif key not in expected:
                found.append(f"{where}: added")
            else:
                found += _differences(expected[key], actual[key], where)
        return found
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in _differences(e, a, f"{path}[{i}]")]
    if expected != actual:
        return [f"{path}: {json.dumps(expected)} -> {json.dumps(actual)}"]
    return []


def test_the_cli_surface_is_the_committed_one():
    actual = cli_surface()
    text = json.dumps(actual, indent=2, ensure_ascii=False) + "\n"
    if os.environ.get(UPDATE_ENV) == "1":
        GOLDEN.write_text(text, encoding="utf-8")
    assert GOLDEN.exists(), f"{GOLDEN.name} is missing; generate it with {REGENERATE}"
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    changes = _differences(expected, actual)
    assert not changes, (
        "the command line's surface changed (committed -> now):\n  "
        + "\n  ".join(changes)
        + f"\nIf the change is deliberate, regenerate {GOLDEN.name} with {REGENERATE}"
    )
    # the same surface, so what is left is order (of commands and options, as --help lists them) or spelling
    assert GOLDEN.read_text(encoding="utf-8") == text, (
        f"the command line's commands or options are listed in another order than {GOLDEN.name} has them, or "
        f"the file was edited by hand; if deliberate, regenerate it with {REGENERATE}"
    )


def _help(argv: list[str]) -> subprocess.CompletedProcess:
    """`argv` run from this checkout, importing this checkout's package: PYTHONPATH comes before the
    editable install's finder, which may point at another checkout sharing the environment."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(argv, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=300)


def test_python_dash_m_answers_help():
    proc = _help([sys.executable, "-m", "compaction_assets", "--help"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Usage: compaction"), proc.stdout[:500]


def test_the_compaction_console_script_answers_help():
    script = Path(sys.executable).parent / "compaction"
    assert script.exists(), f"{script} is missing: the project is not installed in this environment (scripts/setup.sh)"
    proc = _help([str(script), "--help"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Usage: compaction"), proc.stdout[:500]


def test_a_usage_error_exits_2_with_click_s_message_and_the_usage_on_stderr(capsys):
    for argv, usage, message in (
        (["logs", "--bogus"], "Usage: compaction logs [OPTIONS]", "Error: No such option '--bogus'."),
        (["frob"], "Usage: compaction [OPTIONS] COMMAND [ARGS]...", "Error: No such command 'frob'."),
        ([], "Usage: compaction [OPTIONS] COMMAND [ARGS]...", "Error: Missing command."),
        (["config"], "Usage: compaction config [OPTIONS] COMMAND [ARGS]...", "Error: Missing command."),
        (["--now", "soon", "logs"], "Usage: compaction", "Error: Invalid value for '--now': 'soon' is not a valid"),
        (["describe"], "Usage: compaction describe [OPTIONS] LOG", "Error: Missing argument 'LOG'."),
    ):
        capsys.readouterr()
        assert cli.main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(usage) and message in err, (argv, err)


def test_help_exits_0_with_the_help_on_stdout(capsys):
    capsys.readouterr()
    assert cli.main(["table", "scan", "-h"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Usage: compaction table scan [OPTIONS] TOPIC") and "--snapshot-id ID" in out and err == ""
