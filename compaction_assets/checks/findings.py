"""A check's findings: problems counted by kind, each with a few examples, turned into its outcome.

Each of the four checks (verify.py) declares the kinds of problem it looks for, adds what it finds, and
returns the outcome: passed when nothing was found, else a description counting each kind, with the counts
and up to EXAMPLES examples of each kind in its metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compaction_assets.checks.model import Rec

EXAMPLES = 5


@dataclass
class CheckOutcome:
    """One check's verdict, its one-line description and its metadata (counts and examples)."""

    name: str
    passed: bool
    description: str
    metadata: dict = field(default_factory=dict)


def text(b: bytes | None) -> str | None:
    """Bytes as an example shows them (UTF-8, undecodable bytes replaced)."""
    return None if b is None else b.decode("utf-8", "replace")


def example(r: Rec, **extra) -> dict:
    """A record as an example names it: its key and offset, and `extra`."""
    return {"key": text(r.key), "offset": r.offset, **extra}


class Findings:
    """Counted problems, each with up to EXAMPLES examples, turned into an outcome."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list] = {}
        self.order: list[tuple[str, str]] = []

    def kind(self, name: str, words: str) -> None:
        """Declare a kind of problem, described by `words` after its count."""
        self.counts[name] = 0
        self.order.append((name, words))

    def add(self, name: str, example) -> None:
        """Count one problem of kind `name`, kept as an example while there are fewer than EXAMPLES."""
        self.counts[name] += 1
        if len(self.examples.setdefault(name, [])) < EXAMPLES:
            self.examples[name].append(example)

    def outcome(self, check: str, ok_text: str, meta: dict) -> CheckOutcome:
        """The check's outcome: `ok_text` when nothing was found, else the counts of each kind found."""
        bad = [f"{self.counts[n]} {words}" for n, words in self.order if self.counts[n]]
        meta = {**meta, **self.counts, **{f"examples_{n}": ex for n, ex in self.examples.items()}}
        return CheckOutcome(check, not bad, ok_text if not bad else "; ".join(bad), meta)
