"""Base64 text decoded a whole Arrow column at once: byte for byte what the per-row path's
`base64.b64decode(text, validate=True)` (segments/records.decode_base64) gives, without a Python call per value.

Only text in the strict form (the alphabet in groups of four, `=` padding at the end alone) is decoded
here; any other value, even one the per-row decoder would take, makes `decode` answer None, and the caller
reads the file row by row, which accepts it or names the line that it refuses.

How, in a few passes over the column's bytes (none per value): the text is read two characters at a time,
each pair (a uint16) looked up in a table (Arrow's take) that gives its 12 bits already placed in the
little-endian word of its quad's three bytes, with a bit for each `=` and one for any other character, so
a quad's word is one OR of its two pairs' entries; the words are written 3 bytes apart, and the bytes a
value's padding decodes to are filtered out by Arrow's filter kernel.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.ingest.formats.arrowjson import text_bytes

STRICT = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"  # what `decode` takes
ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
PAD = ord("=")
OTHER = 1 << 31  # in a pair's entry: a character neither in the alphabet nor `=`
PADDED = 0xF << 24  # in a quad's word: a bit for each of its characters that is `=`, first to last
LAST_PAD, TWO_PADS = 0x8 << 24, 0xC << 24  # the words of quads ending `x=`, `==`


def _pair_tables() -> tuple[pa.Array, pa.Array]:
    """Per pair of characters (a little-endian uint16: the first character in the low byte), its 12 bits as
    the first pair of a quad places them in the quad's word (byte 0, and byte 1's high nibble), with its `=`
    bits 24 and 25, and as the second places them (byte 1's low nibble, byte 2), with bits 26 and 27; `=` as
    zero bits (its bytes are dropped), OTHER where a character is neither."""
    sixtets = np.full(256, -1, dtype=np.int64)
    sixtets[np.frombuffer(ALPHABET, dtype=np.uint8)] = np.arange(64)
    sixtets[PAD] = 0
    pair = np.arange(1 << 16)
    first, second = sixtets[pair & 0xFF], sixtets[pair >> 8]
    bits = (first << 6) | second
    pads = ((pair & 0xFF) == PAD) | (((pair >> 8) == PAD) << 1)
    lead = (bits >> 4) | ((bits & 0xF) << 12) | (pads << 24)
    tail = ((bits >> 8) << 8) | ((bits & 0xFF) << 16) | (pads << 26)
    other = (first < 0) | (second < 0)
    lead[other] = OTHER
    tail[other] = OTHER
    return pa.array(lead.astype(np.uint32)), pa.array(tail.astype(np.uint32))


LEAD, TAIL = _pair_tables()  # 256 KiB each, built once at import (a few ms of numpy)


def decode(text: pa.Array, empty_is_null: bool = False) -> pa.Array | None:
    """Each value's bytes (a null stays null; with `empty_is_null` an empty text is null too), or None when a
    value is not in STRICT's form."""
    if not (pa.types.is_string(text.type) or pa.types.is_null(text.type)) or sys.byteorder != "little":
        return None  # a big-endian machine's words are not the bytes in order: the rows decode them
    n = len(text)
    if pa.types.is_null(text.type) or text.null_count == n:
        return pa.nulls(n, pa.binary())
    filled = pc.fill_null(text, "") if text.null_count else text  # a null's slot then spans no bytes
    offsets = np.frombuffer(filled.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * filled.offset).astype(np.int64)
    offsets -= offsets[0]
    lengths = offsets[1:] - offsets[:-1]
    if (offsets[-1] // 4 * 3) >= 2**31 or (lengths & 3).any():
        return None  # a length not a multiple of four; or past a binary array's 32-bit offsets
    valid = _validity(text, lengths if empty_is_null else None)
    if not offsets[-1]:
        return pa.Array.from_buffers(
            pa.binary(), n, [valid, pa.py_buffer(np.zeros(n + 1, np.int32)), pa.py_buffer(b"")]
        )
    pairs = text_bytes(filled).view("<u2")
    words = _words(pairs)
    pads = None if words is None else _padding(words, offsets, lengths)
    if words is None or pads is None:
        return None
    data = _bytes(words, offsets[1:] // 4 * 3, pads)
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    new_offsets[1:] = offsets[1:] // 4 * 3 - np.cumsum(pads)
    return pa.Array.from_buffers(pa.binary(), n, [valid, pa.py_buffer(new_offsets.astype(np.int32)), data])


def _words(pairs: np.ndarray) -> np.ndarray | None:
    """Each quad's word (its bytes and `=` bits); None: a character neither in the alphabet nor `=`."""
    lead = pc.take(LEAD, pa.array(pairs[0::2])).to_numpy()
    words = lead | pc.take(TAIL, pa.array(pairs[1::2])).to_numpy()
    return None if int(words.max()) >= OTHER else words


def _validity(text: pa.Array, lengths: np.ndarray | None) -> pa.Buffer | None:
    """The decoded column's validity: the text's, less the empty values where `lengths` are given."""
    if lengths is None or lengths.all():
        return text.is_valid().buffers()[1] if text.null_count else None
    given = lengths > 0
    if text.null_count:
        given &= text.is_valid().to_numpy(zero_copy_only=False)
    return pa.py_buffer(np.packbits(given, bitorder="little"))


def _padding(words: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray | None:
    """Each value's `=` count (0 to 2, at its end); None: `=` anywhere else (a quad with `=` bits is a
    value's last, ending `x=` or `==`)."""
    given = lengths > 0
    last = words[offsets[1:][given] // 4 - 1] & PADDED
    pads = np.zeros(len(lengths), dtype=np.int64)
    pads[given] = (last == LAST_PAD) + 2 * (last == TWO_PADS)
    ending = int(np.count_nonzero(last))
    if int(np.count_nonzero(pads)) != ending or int(np.count_nonzero(words > 0xFFFFFF)) != ending:
        return None
    return pads


def _bytes(words: np.ndarray, ends: np.ndarray, pads: np.ndarray) -> pa.Buffer:
    """The quads' bytes (each word's first three), without those their padding yields (each value's last:
    `ends`, its padding in)."""
    # each word's 4th byte (its `=` bits, read) set to the next word's first, so that writing the words 3
    # bytes apart (each overlapping the next by a byte) leaves the same bytes in whatever order the copy goes
    in_bytes = words.view(np.uint8)
    in_bytes[3:-4:4] = in_bytes[4::4]
    out = np.empty(3 * len(words) + 1, dtype=np.uint8)
    np.ndarray((len(words),), dtype="<u4", buffer=out, strides=(3,))[:] = words
    data = pa.py_buffer(out[:-1])
    if not pads.any():
        return data
    keep = np.ones(len(out) - 1, dtype=bool)
    keep[ends[pads >= 1] - 1] = False
    keep[ends[pads == 2] - 2] = False
    mask = pa.Array.from_buffers(pa.bool_(), len(keep), [None, pa.py_buffer(np.packbits(keep, bitorder="little"))])
    kept = pc.filter(pa.Array.from_buffers(pa.uint8(), len(keep), [None, data]), mask)
    return kept.buffers()[1]
