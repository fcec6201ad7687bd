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

STRICT = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_SIXTETS = np.zeros(256, dtype=np.uint32)  # '=' and anything STRICT has ruled out read as 0
_SIXTETS[np.frombuffer(ALPHABET, dtype=np.uint8)] = np.arange(64, dtype=np.uint32)


def decode(text: pa.Array) -> pa.Array | None:
    """Each value's bytes (a null stays null), or None when a value is not strict base64 text."""
    if not (pa.types.is_string(text.type) or pa.types.is_null(text.type)):
        return None
    n = len(text)
    if pa.types.is_null(text.type) or text.null_count == n:
        return pa.nulls(n, pa.binary())
    filled = pc.fill_null(text, "") if text.null_count else text  # a null's slot then spans no bytes
    if not pc.all(pc.match_substring_regex(filled, STRICT)).as_py():
        return None
    raw = text_bytes(filled)
    offsets = np.frombuffer(filled.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * filled.offset).astype(np.int64)
    offsets -= offsets[0]
    quads = _SIXTETS[raw].reshape(-1, 4)
    decoded = np.empty((len(quads), 3), dtype=np.uint8)
    decoded[:, 0] = (quads[:, 0] << 2) | (quads[:, 1] >> 4)
    decoded[:, 1] = ((quads[:, 1] & 15) << 4) | (quads[:, 2] >> 2)
    decoded[:, 2] = ((quads[:, 2] & 3) << 6) | quads[:, 3]
    ends = offsets[1:] // 4 * 3  # each value's end in `decoded`, its padding's bytes still in
    pads = pc.count_substring(filled, "=").to_numpy(zero_copy_only=False).astype(np.int64)
    keep = np.ones(len(quads) * 3, dtype=bool)
    keep[ends[pads >= 1] - 1] = False
    keep[ends[pads == 2] - 2] = False
    data = decoded.reshape(-1)[keep] if pads.any() else decoded.reshape(-1)
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    new_offsets[1:] = ends - np.cumsum(pads)
    if new_offsets[-1] >= 2**31:
        return None  # past a binary array's 32-bit offsets: the rows decide
    validity = text.is_valid().buffers()[1] if text.null_count else None
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(new_offsets.astype(np.int32)), pa.py_buffer(data)], text.null_count
    )
