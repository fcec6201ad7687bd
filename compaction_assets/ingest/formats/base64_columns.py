"""Base64 text decoded a whole Arrow column at once: byte for byte what the per-row path's
`base64.b64decode(text, validate=True)` (segments/records.decode_base64) gives, without a Python call per value.

Only text in the strict form (the alphabet in groups of four, `=` padding at the end alone) is decoded
here; any other value, even one the per-row decoder would take, makes `decode` answer None, and the caller
reads the file row by row, which accepts it or names the line that it refuses.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.ingest.formats.arrowjson import text_bytes

STRICT = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"  # what `decode` takes
ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
PAD, OTHER = 64, 255
# each character's six bits, for bytes.translate: `=` PAD (the bytes it yields are padding, dropped), any
# other character OTHER
SIXTETS = bytes(ALPHABET.index(c) if c in ALPHABET else PAD if c == ord("=") else OTHER for c in range(256))


def decode(text: pa.Array) -> pa.Array | None:
    """Each value's bytes (a null stays null), or None when a value is not in STRICT's form."""
    if not (pa.types.is_string(text.type) or pa.types.is_null(text.type)):
        return None
    n = len(text)
    if pa.types.is_null(text.type) or text.null_count == n:
        return pa.nulls(n, pa.binary())
    filled = pc.fill_null(text, "") if text.null_count else text  # a null's slot then spans no bytes
    offsets = np.frombuffer(filled.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * filled.offset).astype(np.int64)
    offsets -= offsets[0]
    if (offsets[-1] // 4 * 3) >= 2**31 or ((offsets[1:] - offsets[:-1]) % 4).any():
        return None  # a length not a multiple of four; or past a binary array's 32-bit offsets
    if not offsets[-1]:
        return text.cast(pa.binary())  # every value "" or null
    sixtets = np.frombuffer(text_bytes(filled).tobytes().translate(SIXTETS), dtype=np.uint8)
    pads = _padding(sixtets, offsets)
    if pads is None:
        return None
    data = _bytes(sixtets.reshape(-1, 4), offsets[1:] // 4 * 3, pads)
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    new_offsets[1:] = offsets[1:] // 4 * 3 - np.cumsum(pads)
    validity = text.is_valid().buffers()[1] if text.null_count else None
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(new_offsets.astype(np.int32)), pa.py_buffer(data)], text.null_count
    )


def _padding(sixtets: np.ndarray, offsets: np.ndarray) -> np.ndarray | None:
    """Each value's `=` count (0 to 2, all at its end); None: a character outside the alphabet, or `=`
    anywhere else."""
    if (sixtets == OTHER).any():
        return None
    given = offsets[1:] > offsets[:-1]
    last = np.maximum(offsets[1:] - 1, 0)
    one = given & (sixtets[last] == PAD)
    two = one & (sixtets[np.maximum(last - 1, 0)] == PAD)
    pads = one.astype(np.int64) + two
    return pads if int((sixtets == PAD).sum()) == int(pads.sum()) else None


def _bytes(quads: np.ndarray, ends: np.ndarray, pads: np.ndarray) -> np.ndarray:
    """The quads' bytes, without those their padding yields (each value's last: `ends`, its padding in)."""
    decoded = np.empty((len(quads), 3), dtype=np.uint8)
    # uint8 arithmetic: a shift drops the bits past the byte, as the decoder's does
    decoded[:, 0] = (quads[:, 0] << 2) | (quads[:, 1] >> 4)
    decoded[:, 1] = ((quads[:, 1] & 15) << 4) | (quads[:, 2] >> 2)
    decoded[:, 2] = ((quads[:, 2] & 3) << 6) | quads[:, 3]
    data = decoded.reshape(-1)
    if not pads.any():
        return data
    keep = np.ones(len(data), dtype=bool)
    keep[ends[pads >= 1] - 1] = False
    keep[ends[pads == 2] - 2] = False
    return data[keep]
