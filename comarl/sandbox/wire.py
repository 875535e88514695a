"""Frames between the trusted harness and the worker that runs model code.

A frame is a 4-byte little-endian length and a pickle (protocol 5). The worker
(untrusted) writes values as *plain data*: objects whose type is exactly one of
``PLAIN_TYPES``, nested; anything else stays in the worker and travels as a
reference ``(ref, kind)`` (pickle's persistent id). The trusted side reads
frames with :class:`PlainUnpickler`, which can build nothing but those types
and references: it refuses every global (no class, no function, no
``__reduce__`` of the worker's choosing; ``complex`` is the one exception), so
whatever bytes the worker writes, the harness gets plain data or an error.

Standard library only: the harness loads this file by path before isolating.
"""
from __future__ import annotations

import builtins
import importlib
import io
import os
import pickle
import struct

MAX_FRAME = 64 << 20  # bytes; a longer frame from the worker is a protocol error
PLAIN_TYPES = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set,
                         frozenset})
LIVE_KINDS = ("list", "dict", "set", "bytearray")  # attribute values that stay mutable in the worker
# Standard-library value types that travel by value: the trusted side rebuilds them with its own classes
# (their __eq__ is the standard library's), from plain arguments. (module, name) -> exact class name check.
VALUE_CLASSES = frozenset({
    ("builtins", "complex"), ("datetime", "datetime"), ("datetime", "date"), ("datetime", "time"),
    ("datetime", "timedelta"), ("datetime", "timezone"), ("decimal", "Decimal"), ("fractions", "Fraction"),
    ("collections", "deque"), ("collections", "OrderedDict"), ("collections", "Counter")})
_PLAIN_NAMES = frozenset(t.__name__ for t in PLAIN_TYPES) - {"NoneType"}
_HEAD = struct.Struct("<I")


class ProtocolError(Exception):
    """The other side sent something that is not a valid frame."""


def write_frame(fd: int, data: bytes) -> None:
    buf = _HEAD.pack(len(data)) + data
    view = memoryview(buf)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd: int, n: int) -> bytes:
    """``n`` bytes from ``fd``; EOFError when the writer is gone first."""
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> bytes:
    (n,) = _HEAD.unpack(read_exact(fd, _HEAD.size))
    if n > MAX_FRAME:
        raise ProtocolError(f"frame of {n} bytes exceeds {MAX_FRAME}")
    return read_exact(fd, n)


class PlainUnpickler(pickle.Unpickler):
    """Builds only plain data; a persistent id ``(int, str)`` becomes ``make_ref(ref, kind)``."""

    def __init__(self, data: bytes, make_ref):
        super().__init__(io.BytesIO(data))
        self._make_ref = make_ref

    def find_class(self, module, name):
        if (module, name) in VALUE_CLASSES:
            return getattr(importlib.import_module(module), name)
        if module == "builtins" and name in _PLAIN_NAMES:
            return getattr(builtins, name)  # the class itself (a program storing {'age': int})
        raise ProtocolError(f"refused global {module}.{name}")

    def persistent_load(self, pid):
        if type(pid) is tuple and len(pid) == 3 and pid[1] == "value:image":
            return trusted_image(pid[2])
        if type(pid) is not tuple or len(pid) != 2 or type(pid[0]) is not int or type(pid[1]) is not str:
            raise ProtocolError("malformed reference")
        return self._make_ref(pid[0], pid[1])


MAX_IMAGE_SIDE = 1 << 14


def trusted_image(state):
    """A PIL image the worker sent by value, rebuilt by the harness's own PIL after checking every field."""
    if (type(state) is not tuple or len(state) != 6 or type(state[0]) is not str or type(state[1]) is not int
            or type(state[2]) is not int or type(state[3]) is not bytes or type(state[4]) is not str
            or type(state[5]) is not str):
        raise ProtocolError("malformed image")
    mode, w, h, data, fmt, filename = state
    if not (0 <= w <= MAX_IMAGE_SIDE and 0 <= h <= MAX_IMAGE_SIDE and len(mode) <= 16 and len(fmt) <= 32
            and len(filename) <= 4096):
        raise ProtocolError("image out of bounds")
    from PIL import Image
    img = Image.frombytes(mode, (w, h), data)
    img.format = fmt or None
    if filename:
        img.filename = filename  # type: ignore[attr-defined]  # PIL file loaders set it; keep it
    return img


def loads_plain(data: bytes, make_ref):
    """Trusted side: decode a worker frame (see :class:`PlainUnpickler`)."""
    try:
        return PlainUnpickler(data, make_ref).load()
    except ProtocolError:
        raise
    except Exception as e:  # truncated, recursion, a reference refusing to be built...
        raise ProtocolError(f"bad frame from the program: {type(e).__name__}: {e}") from None
