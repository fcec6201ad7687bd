"""Secrets kept out of every message: the one place that says what a secret looks like and masks it.

Two kinds are masked. A credential written inside a URI (`scheme://user:password@host`, a `;token=...` or
`?password=...` parameter) is masked wherever it appears, whoever wrote it. A value the process was given
as a secret (an S3 secret key, the webhook's token, a catalog's password ...) is masked wherever it
appears once a source names it: `settings` registers the environment's secrets as a source when it is
imported (this module sits below it and reads nothing itself), and a caller holding a secret of its own
(a token bound in code) passes it as `extra`.

`errors.first_line` and every product error's message (`CompactionError.__str__`) go through `redact`, so
an error is safe wherever it is shown: a command's output, a log line, a Dagster event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

MASK = "***"
# A shorter value is not masked: masking a 3-letter secret would garble every word that contains it, and a
# secret that short gives no protection worth keeping anyway.
MIN_SECRET_CHARS = 6
# `scheme://user:password@`: the password (the user stays, so a message still says whose it is)
_USERINFO = re.compile(r"(?P<lead>[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s'\"]*:)(?P<secret>[^@/?#\s'\"]+)(?=@)")
# a URI or connection parameter whose name says it holds a credential: `;token=`, `?password=`, `&api_key=`
_PARAMETER = re.compile(
    r"(?P<lead>[;?&][A-Za-z0-9_.-]*(?:token|password|passwd|pwd|secret|credential|signature|key)=)"
    r"(?P<secret>[^;&#\s'\"]+)",
    re.IGNORECASE,
)
# A variable whose name says it holds a secret, declared by the product or read by a library itself (pyiceberg's
# PYICEBERG_CATALOG__COMPACTION__CREDENTIAL, AZURE_CLIENT_SECRET, PGPASSWORD, DAGSTER_PG_PASSWORD ...)
_SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIAL|PRIVATE_KEY|ACCOUNT_KEY|API_KEY|ACCESS_KEY")
_SOURCES: list[Callable[[], Iterable[str]]] = []


def add_source(source: Callable[[], Iterable[str]]) -> None:
    """Mask, from now on, the values `source` returns when asked (it is asked at each `redact`, so a value set
    later is masked too). A source must not fail."""
    if source not in _SOURCES:
        _SOURCES.append(source)


def in_uris(text: str) -> list[str]:
    """The credentials written inside URIs in `text` (passwords of `user:password@`, credential parameters)."""
    return [m["secret"] for pattern in (_USERINFO, _PARAMETER) for m in pattern.finditer(text)]


def secrets_in(environment: Mapping[str, str], declared: Iterable[str]) -> list[str]:
    """The secrets of an environment handed over (`settings` reads it): the value of each variable `declared`
    secret or named as one, and the credentials written inside any variable's URI (a catalog URI's password,
    DAGSTER_PG_URL's, a Spark Connect token)."""
    declared = frozenset(declared)
    found = []
    for name, value in environment.items():
        if name in declared or _SECRET_NAME.search(name.upper()):
            found.append(value)
        if "://" in value or "=" in value:
            found.extend(in_uris(value))
    return found


def redact_uri(text: str) -> str:
    """`text` with the credentials written inside its URIs masked (no value needs to be known)."""
    return _PARAMETER.sub(rf"\g<lead>{MASK}", _USERINFO.sub(rf"\g<lead>{MASK}", text))


def redact(text: str, extra: Iterable[str | None] = ()) -> str:
    """`text` with every known secret value (the sources' and `extra`) and every credential inside a URI
    masked. Never fails: it guards error reporting."""
    values = {value for value in extra if value}
    for source in _SOURCES:
        values.update(source())
    # longest first: a secret that contains another is masked whole
    for value in sorted((v for v in values if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True):
        text = text.replace(value, MASK)
    return redact_uri(text)
