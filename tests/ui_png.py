"""A minimal PNG reader for the UI tests: enough to tell a real screenshot from a blank one.

Handles what Chromium's screenshots are (8-bit greyscale/RGB/RGBA, non-interlaced) with the
standard library only (zlib + struct); anything else raises ValueError.
"""

from __future__ import annotations

import struct
import zlib
from collections import Counter

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # colour type -> samples per pixel


def decode(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, channels, rows): the unfiltered scanlines of an 8-bit PNG."""
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG")
    pos, header, idat = len(SIGNATURE), None, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0]:
            raise ValueError(f"bad CRC in {kind!r} chunk")
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None or not idat:
        raise ValueError("PNG without IHDR or IDAT")
    width, height, depth, colour, _compression, _filter, interlace = header
    if depth != 8 or colour not in CHANNELS or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}, interlace {interlace}")
    bpp = CHANNELS[colour]
    stride = width * bpp
    raw = zlib.decompress(b"".join(idat))
    if len(raw) != height * (stride + 1):
        raise ValueError("PNG image data has the wrong size")
    rows, prev = [], bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if ftype == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif ftype == 2:  # Up
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif ftype == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        elif ftype != 0:
            raise ValueError(f"bad PNG filter type {ftype}")
        prev = bytes(line)
        rows.append(prev)
    return width, height, bpp, rows


def colour_stats(data: bytes, step: int = 4) -> tuple[int, float]:
    """(distinct colours, share of the most common colour) over every `step`-th pixel of every `step`-th row."""
    width, _height, bpp, rows = decode(data)
    counts: Counter[bytes] = Counter()
    for row in rows[::step]:
        for x in range(0, width, step):
            counts[row[x * bpp : (x + 1) * bpp]] += 1
    total = sum(counts.values())
    return len(counts), counts.most_common(1)[0][1] / total
