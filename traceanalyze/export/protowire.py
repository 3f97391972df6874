"""The few pieces of the protobuf wire format the Perfetto trace writer needs.

Varints (wire type 0), 64-bit fixed values (type 1) and length-delimited fields (type 2), as
https://protobuf.dev/programming-guides/encoding/ describes them; negative integers as their
64-bit two's complement (`int64` fields). No dependency: the `protobuf` package is only used by
the tests, to decode what this writes.
"""

from __future__ import annotations

import struct

import numpy as np

VARINT, I64, LEN = 0, 1, 2
_Q = struct.Struct("<Q")
_D = struct.Struct("<d")


_SMALL = [bytes((i,)) for i in range(0x80)]


def varint(n: int) -> bytes:
    """`n` as a base-128 varint (a negative `n` as its 64-bit two's complement, 10 bytes)."""
    if 0 <= n < 0x80:
        return _SMALL[n]
    if 0 < n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def uint(field: int, n: int) -> bytes:
    """A varint field (`uint32`, `uint64`, `int32`, `int64`, `bool`, enums)."""
    return tag(field, VARINT) + varint(n)


def ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field: an embedded message or bytes."""
    return tag(field, LEN) + varint(len(payload)) + payload


def text(field: int, s: str) -> bytes:
    return ld(field, s.encode())


def fixed64(field: int, n: int) -> bytes:
    return tag(field, I64) + _Q.pack(n)


def double(field: int, x: float) -> bytes:
    return tag(field, I64) + _D.pack(x)


def varints(values: np.ndarray) -> list[bytes]:
    """Each of `values` (integers; a negative one as its 64-bit two's complement, as `varint`)
    as a varint: the bytes of all of them computed with numpy, then cut per value."""
    v = values.astype(np.int64).view(np.uint64).copy()
    n = v.shape[0]
    out = np.zeros((n, 10), dtype=np.uint8)
    lens = np.ones(n, dtype=np.int64)
    for k in range(10):
        out[:, k] = (v & np.uint64(0x7F)).astype(np.uint8)
        v >>= np.uint64(7)
        more = v > 0
        if not more.any():
            break
        out[more, k] |= 0x80
        lens += more
    raw = out.tobytes()
    return [raw[i * 10 : i * 10 + size] for i, size in enumerate(lens.tolist())]
