"""`StrEnum` on every Python the project supports (3.10 and later): the standard library's from 3.11, and on
3.10, which has none, the same behaviour built from `str` and `Enum` (a member equals its value and prints
as it, in `str()` and in f-strings). The topic settings' choices (`Strategy`, `ConfigSource`) are such
enumerations.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:
    from enum import Enum

    class StrEnum(str, Enum):
        """An enumeration whose members are strings, printed and formatted as their values."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, format_spec: str) -> str:
            return str.__format__(self, format_spec)


__all__ = ["StrEnum"]
