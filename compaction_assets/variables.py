"""How an environment variable of the product is declared, parsed and documented.

A `Variable` is the one declaration of a variable: its name, its default, the parser of a value that is set
and the line of docs/configuration.md's environment table that documents it. `Declarations` collects them
in the order of that table; `settings.py` declares every variable through it and reads the environment,
this module never does: it parses values handed to it. A value a parser refuses is a `ConfigError` naming
the variable, its value and the rule.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass

from compaction_assets.errors import ConfigError
from compaction_assets.redaction import redact_uri

# typing.TYPE_CHECKING without importing typing: every command imports this module first, before anything
# that needs typing at run time (type checkers take the name as true)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    from _typeshed import DataclassInstance

    Settings = TypeVar("Settings", bound=DataclassInstance)

# the field metadata that ties a field of the settings to its variable (and to a variable read when unset)
VARIABLE = "variable"
FALLBACK = "fallback"
TABLE_MARKER = "<!-- environment-table -->"  # the line of docs/configuration.md above the table
TABLE_HEADER = ("| variable | default | meaning |", "|---|---|---|")


class RefusedValue(ValueError):
    """A parser's refusal; its message is the rule the value breaks."""


@dataclass(frozen=True)
class Variable:
    """One environment variable: its value when unset or blank, the parser of any other value, its docs."""

    name: str
    default: object
    parse: Callable[[str], object]
    doc: str  # the meaning column of the environment table
    default_doc: str  # the default column
    secret: bool = False  # its value is masked in every message (compaction_assets/redaction.py)


def text(raw: str) -> str:
    """The value as set."""
    return raw


def stripped(raw: str) -> str:
    """The value without surrounding blanks."""
    return raw.strip()


def lowercase(raw: str) -> str:
    """The value without surrounding blanks, in lower case."""
    return raw.strip().lower()


def positive_seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise RefusedValue("must be a positive number of seconds")
    return value


def positive_int(raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise RefusedValue("must be a positive whole number") from None
    if value < 1:
        raise RefusedValue("must be a positive whole number")
    return value


def one_of(*choices: str) -> Callable[[str], str]:
    """A parser of one of `choices` (any case, blanks around it allowed)."""

    def choice(raw: str) -> str:
        if raw.strip().lower() not in choices:
            raise RefusedValue(f"must be one of {', '.join(choices)}")
        return raw.strip().lower()

    return choice


def yes_no(yes: tuple[str, ...] | None = None) -> Callable[[str], bool]:
    """The yes/no parser. The product's own variables are no for 0, false or no and yes for anything else; a
    variable another library reads too (`yes` given) is yes for those words only, as that library takes it."""

    def flag(raw: str) -> bool:
        word = raw.strip().lower()
        return word in yes if yes is not None else word not in ("0", "false", "no")

    return flag


def shown(default: object) -> str:
    """A default as the environment table shows it when its declaration says nothing else."""
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"


class Declarations:
    """The variables a program reads, in the order its documentation lists them."""

    def __init__(self) -> None:
        self.variables: dict[str, Variable] = {}

    def declare(
        self,
        name: str,
        doc: str,
        *,
        default: object = None,
        parse: Callable[[str], object] = text,
        shown_as: str = "",
        secret: bool = False,
    ) -> str:
        """Declare variable `name`: its docs, its default (unset: None) and its parser (the value as set); its
        default is shown as `shown` says unless `shown_as` says how; a `secret` one's value is never shown.
        Returns the name."""
        assert name not in self.variables, f"{name} declared twice"
        self.variables[name] = Variable(name, default, parse, doc, shown_as or shown(default), secret)
        return name

    def secret_names(self) -> frozenset[str]:
        """The variables declared secret."""
        return frozenset(name for name, variable in self.variables.items() if variable.secret)

    def field(self, name: str, *, fallback: str | None = None) -> Any:
        """A dataclass field read from variable `name` (when unset, from `fallback`), defaulting to its
        default; a secret variable's field is left out of the repr (so out of any log or error)."""
        metadata = {VARIABLE: name, FALLBACK: fallback}
        return field(default=self.variables[name].default, repr=not self.variables[name].secret, metadata=metadata)

    def value(self, env: Mapping[str, str], name: str) -> Any:
        """The value of variable `name` in `env`: its default when unset or blank, else its parsed value."""
        variable = self.variables[name]
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            return variable.default
        try:
            return variable.parse(raw)
        except RefusedValue as exc:
            raise ConfigError(f"{name}={raw!r}: {exc}") from None

    def read(self, cls: type[Settings], env: Mapping[str, str]) -> dict[str, Any]:
        """The values of dataclass `cls`'s fields read from `env`: each field from its variable (`field`), each
        group of them (a field whose default is such a dataclass) as a dict of its own. The caller builds the
        dataclasses, so that reading the environment never calls back into the module that declares them."""
        values: dict[str, Any] = {}
        for item in fields(cls):
            name = item.metadata.get(VARIABLE)
            if name is None:
                group = item.default_factory
                assert isinstance(group, type) and is_dataclass(group), f"{item.name}: neither a variable nor a group"
                values[item.name] = self.read(group, env)
                continue
            fallback = item.metadata[FALLBACK]
            unset = (env.get(name) or "").strip() == ""
            values[item.name] = self.value(env, fallback if fallback is not None and unset else name)
        return values

    def markdown_table(self) -> str:
        """docs/configuration.md's environment table: a row per variable, in declaration order."""
        rows = [f"| `{v.name}` | {v.default_doc} | {v.doc} |" for v in self.variables.values()]
        return "\n".join([*TABLE_HEADER, *rows]) + "\n"

    def docs_command(self, argv: list[str]) -> int:
        """`--docs`: print the environment table; `--docs FILE`: rewrite the table after TABLE_MARKER in FILE."""
        if argv[:1] != ["--docs"] or len(argv) > 2:
            print("usage: --docs [FILE]  (print the environment table, or rewrite it in FILE)", file=sys.stderr)
            return 2
        if len(argv) == 1:
            print(self.markdown_table(), end="")
            return 0
        with open(argv[1], encoding="utf-8") as file:
            document = file.read()
        with open(argv[1], "w", encoding="utf-8") as file:
            file.write(with_table(document, self.markdown_table()))
        return 0


def masked_repr(instance: DataclassInstance) -> str:
    """The repr of a settings dataclass (declared with `repr=False`, its `__repr__` this): its fields but the
    secret ones, and the credentials written inside a URI (a catalog's password, a Connect token) masked."""
    shown_fields = ", ".join(f"{f.name}={getattr(instance, f.name)!r}" for f in fields(instance) if f.repr)
    return redact_uri(f"{type(instance).__name__}({shown_fields})")


def with_table(document: str, table: str) -> str:
    """`document` (Markdown) with the table right after its TABLE_MARKER line replaced by `table`."""
    lines = document.splitlines(keepends=True)
    start = lines.index(TABLE_MARKER + "\n") + 1
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join([*lines[:start], table, *lines[end:]])
