"""Record headers: the one parser of headers as readers hand them over, and their stored form read back.

Every reader of records parses headers here, each with its own `HeaderRules`, since each format has always
accepted its own shapes and worded its refusals its own way (the corpus tests pin those messages):

- a record handed to `append` (records.INPUT_HEADERS): a map, or a list or tuple of [name, value] pairs or
  {name, value} records; a value is bytes, text (UTF-8) or an integer (its 8 bytes, big-endian);
- a JSON Lines input file (input_files.JSON_HEADERS): a map or [name, value] pairs, no records; a value is
  text, an integer or {"b64": ...}, and an integer too wide for 8 bytes is worded without the record rule's
  "(a signed 64-bit integer)";
- an Avro input file (input_files.AVRO_HEADERS): an array of {key or name, value} records only; a value is
  bytes, text or null;
- a connector's record (shapes.CONNECTOR_HEADERS): a map, [name, value] pairs, or {key or name, value}
  records (`key` first: Kafka Connect's name); a value is text, bytes or null, never an integer.

The parser returns (name, value) pairs: the value as stored (bytes or None) under the record and connector
rules; the input files' rules leave text and integers for the record rule to encode, as it always has (an
input file is checked whole before any of its records is encoded).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from compaction_assets.errors import InvalidInputError

V = TypeVar("V")  # a header value as one reader's rules leave it


@dataclass(frozen=True)
class HeaderRules(Generic[V]):
    """What one reader accepts as headers, and how it words a refusal.

    The messages are templates formatted with `where` (the record), `raw` (the headers as given), `kind`
    (their type's name), `header` (one header as given) and `name` (its name)."""

    maps: bool  # a map {name: value} is taken as its pairs
    sequences: tuple[type[list[Any]] | type[tuple[Any, ...]], ...]  # the containers of headers taken one by one
    record_names: tuple[str, ...]  # a header given as a record: its name fields, first present wins (none: refused)
    pairs: bool  # a header given as a [name, value] pair
    value: Callable[[Any, str, str], V]  # (value, header name, where) to the value kept, or refused
    not_a_list: str
    malformed: str
    name_not_text: str


def parse_headers(raw: Any, where: str, rules: HeaderRules[V]) -> list[tuple[str, V]]:
    """Headers as a reader handed them over (None: none), as (name, value) pairs under `rules`; a refusal is
    an InvalidInputError naming `where`."""
    if raw is None:
        return []
    items: Any = list(raw.items()) if rules.maps and isinstance(raw, Mapping) else raw
    if not isinstance(items, rules.sequences):
        raise InvalidInputError(rules.not_a_list.format(where=where, raw=raw, kind=type(raw).__name__))
    out = []
    for header in items:
        name, value = _name_and_value(header, rules)
        if name is _MALFORMED:
            raise InvalidInputError(rules.malformed.format(where=where, header=header))
        if not isinstance(name, str):
            raise InvalidInputError(rules.name_not_text.format(where=where, header=header, name=name))
        out.append((name, rules.value(value, name, where)))
    return out


_MALFORMED = object()


def _name_and_value(header: Any, rules: HeaderRules) -> tuple[Any, Any]:
    """A header's name and value as given, or (_MALFORMED, None) for a shape the rules refuse."""
    if rules.record_names and isinstance(header, Mapping):
        field = next((f for f in rules.record_names if f in header), None)
        return (header[field] if field is not None else None), header.get("value")
    if rules.pairs and isinstance(header, (list, tuple)) and len(header) == 2:
        return header[0], header[1]
    return _MALFORMED, None


def decode_headers(raw: list[dict[str, Any]] | None) -> list[tuple[str, bytes | None]]:
    """Headers as (name, bytes) pairs from their stored form."""
    return [(h["name"], h["value"]) for h in (raw or [])]


def header_version(headers: Iterable[tuple[str, bytes | None]], name: str) -> int | None:
    """The version of the `header` strategy: the last header `name`, as an 8-byte big-endian signed long."""
    found = None
    for hname, hvalue in headers:
        if hname == name:
            found = hvalue
    if found is None or len(found) != 8:
        return None
    return int.from_bytes(found, "big", signed=True)
