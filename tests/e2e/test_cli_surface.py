"""The command line's surface, pinned: every command, sub-command and option of `compaction` (its flags,
action, nargs, required, choices, default, type, metavar and help, as argparse holds them), walked from
the parser and compared with the committed tests/e2e/cli_surface.json, so that a change of the parser's
code that changes what an operator types or reads is seen and named. A deliberate change regenerates the
file: `UPDATE_CLI_SURFACE=1 .venv/bin/python -m pytest tests/e2e/test_cli_surface.py`, and the diff of
cli_surface.json goes to review with it. Both entry points answer `--help`."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from compaction_assets import cli

GOLDEN = Path(__file__).with_name("cli_surface.json")
UPDATE_ENV = "UPDATE_CLI_SURFACE"
REGENERATE = f"{UPDATE_ENV}=1 .venv/bin/python -m pytest tests/e2e/test_cli_surface.py"
REPO = Path(__file__).resolve().parents[2]


def _action_name(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The name `add_argument(action=...)` takes for this action's class ("store_true", "help", ...)."""
    registered = parser._registries["action"]  # argparse's own table of action names, no public accessor
    names = sorted(name for name, cls in registered.items() if isinstance(name, str) and cls is type(action))
    return names[0] if names else type(action).__name__


def _jsonable(value: object) -> object:
    """A default or choice as JSON holds it: a callable or another object by its name or repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return getattr(value, "__name__", repr(value))


def _argument(parser: argparse.ArgumentParser, action: argparse.Action) -> dict[str, object]:
    """One option or positional argument: what argparse exposes of it, None where it holds nothing."""
    return {
        "flags": list(action.option_strings),
        "action": _action_name(parser, action),
        "nargs": action.nargs,
        "required": action.required,
        "choices": _jsonable(action.choices),
        "default": _jsonable(action.default),
        "type": _jsonable(action.type),
        "metavar": _jsonable(action.metavar),
        "help": action.help,
    }


def _subcommands(action: argparse._SubParsersAction) -> dict[str, object]:
    """The sub-commands of one `add_subparsers`, each walked in turn, in the order --help lists them."""
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    return {name: _command(sub, helps.get(name)) for name, sub in action.choices.items()}


def _command(parser: argparse.ArgumentParser, help_text: str | None) -> dict[str, object]:
    """A parser's surface: its prog, help and description, its options (by flags), its positionals (in
    order) and, when it has them, its sub-commands (with the name they are read into and whether one is
    required)."""
    surface: dict[str, object] = {"prog": parser.prog, "help": help_text, "description": parser.description}
    options: dict[str, object] = {}
    positionals: list[object] = []
    for action in parser._actions:  # argparse keeps a parser's arguments here only
        if isinstance(action, argparse._SubParsersAction):
            surface["subcommand_dest"] = action.dest
            surface["subcommand_required"] = action.required
            surface["subcommands"] = _subcommands(action)
        elif action.option_strings:
            options[", ".join(action.option_strings)] = _argument(parser, action)
        else:
            positionals.append({"name": action.dest, **_argument(parser, action)})
    surface["options"] = options
    surface["positionals"] = positionals
    return surface


def cli_surface() -> dict[str, object]:
    """The whole command line's surface, from today's parser."""
    return _command(cli.build_parser(), None)


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
    assert proc.stdout.startswith("usage: compaction"), proc.stdout[:500]


def test_the_compaction_console_script_answers_help():
    script = Path(sys.executable).parent / "compaction"
    assert script.exists(), f"{script} is missing: the project is not installed in this environment (scripts/setup.sh)"
    proc = _help([str(script), "--help"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: compaction"), proc.stdout[:500]
