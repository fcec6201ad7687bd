"""Who holds a log's lease: the lease file's JSON (`<log>/_locks/<kind>.lock`), written and read here."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LockHolder:
    """A lease file's content: its holder, why it holds the lease, since and until when, and its epoch."""

    owner: str | None = None  # "<host>:<pid>:<8 hex>", one per lease taken; None: a foreign lock object
    pid: int | None = None  # the holder's process id
    host: str | None = None  # the holder's host name
    purpose: str | None = None  # what it holds the lease for (in the LockedError a second writer gets)
    acquired_ms: int | None = None  # when it took the lease (renewals keep it); what it wrote since is its own
    epoch: int = 0  # grows with every holder; fences commits of the holders before it
    expires_ms: int = 0  # the lease is free after this (wall clock); 0: expired, taken over at once

    @classmethod
    def from_json(cls, data: bytes) -> LockHolder | None:
        """The holder a lease file names; None for a torn or foreign one (not a JSON object of a lease)."""
        try:
            document = json.loads(data)
            if not isinstance(document, dict):
                return None
            acquired = document.get("acquired_ms")
            # missing keys take their defaults: a lease written by hand or by an older version still reads
            return cls(
                owner=document.get("owner"),
                pid=document.get("pid"),
                host=document.get("host"),
                purpose=document.get("purpose"),
                acquired_ms=None if acquired is None else int(acquired),
                epoch=int(document.get("epoch", 0)),
                expires_ms=int(document.get("expires_ms", 0)),
            )
        except (ValueError, TypeError):
            return None

    def to_json(self) -> bytes:
        """The lease file's bytes: one JSON object, its keys in the fields' order."""
        return json.dumps(asdict(self)).encode()
