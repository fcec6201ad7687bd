"""How the command line prints stored bytes, one way in every command that prints them (`read`, `latest-state`,
`table scan`; docs/cli.md, "Record format"), so that what `read` prints is what `append` reads back.

- A key or a value is text (`key`, `value`) when its bytes are printable UTF-8, else base64 under `key_b64`
  / `value_b64`. Printable: no control character other than tab, line feed and carriage return (bytes such
  as a binary number's `\\x00\\x00...` decode as UTF-8 but are not text, and JSON would show them as
  `"\\u0000\\u0000..."`).
- A header value is text under the same rule, else `{"b64": ...}`; the topic's version header (the `header`
  strategy's `compaction.strategy.header`, 8 bytes big-endian, as a CDC connector writes it) is its number.
"""

from __future__ import annotations

import base64
import unicodedata
from typing import Any

from compaction_assets.topics.config import Strategy, TopicConfig

# the control characters that text may hold (JSON escapes them, but they are text)
TEXT_CONTROLS = frozenset("\t\n\r")
VERSION_BYTES = 8  # a version header's value: a signed 64-bit integer, big-endian (SPEC §6)


def as_text(data: bytes) -> str | None:
    """The bytes as text when they are printable UTF-8 (see the module's rule), else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(unicodedata.category(ch) == "Cc" and ch not in TEXT_CONTROLS for ch in text):
        return None
    return text


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def put_bytes(obj: dict[str, Any], name: str, data: bytes | None) -> None:
    """`name` as text, or `name_b64` in base64 when the bytes are not printable UTF-8 (null stays `name`)."""
    if data is None:
        obj[name] = None
        return
    text = as_text(data)
    if text is None:
        obj[f"{name}_b64"] = b64(data)
    else:
        obj[name] = text


def version_header(config: TopicConfig | None) -> str | None:
    """The header whose value is a version (printed as its number): the `header` strategy's, else none."""
    if config is None or config.strategy != Strategy.HEADER:
        return None
    return config.strategy_header


def header_value(name: str, data: bytes | None, version: str | None) -> Any:
    """A header value as printed: its number for the version header, text, or {"b64": ...}."""
    if data is None:
        return None
    if name == version and len(data) == VERSION_BYTES:
        return int.from_bytes(data, "big", signed=True)
    text = as_text(data)
    return {"b64": b64(data)} if text is None else text


def headers(pairs, version: str | None) -> list[list[Any]]:
    """Headers as `[[name, value], ...]`, from (name, bytes) pairs or the table's {name, value} records."""
    out = []
    for pair in pairs or []:
        name, data = (pair["name"], pair["value"]) if isinstance(pair, dict) else pair
        out.append([name, header_value(name, data, version)])
    return out


def table_row(row: dict[str, Any], version: str | None) -> dict[str, Any]:
    """A row of a topic's table as printed: key and value as `read` prints them, the headers too, any other
    column (a connector's) as it is, its bytes as {"b64": ...} when not printable."""
    out: dict[str, Any] = {}
    for column, value in row.items():
        if column in ("key", "value"):
            put_bytes(out, column, value)
        elif column == "headers":
            out[column] = headers(value, version)
        else:
            out[column] = _other(value)
    return out


def _other(value: Any) -> Any:
    if isinstance(value, bytes):
        text = as_text(value)
        return {"b64": b64(value)} if text is None else text
    if isinstance(value, dict):
        return {k: _other(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_other(v) for v in value]
    return value
