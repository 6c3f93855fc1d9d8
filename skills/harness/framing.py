"""msgpack maps framed by a big-endian length, over raw file descriptors.

The worker's protocol with the C++ side uses a 4-byte length. The channel between the worker and a
candidate's child uses an 8-byte length (wide=True); tensors do not travel in its frames but as
files named in them (exchange.py), so those frames stay small."""
import os
import struct

import msgpack

MAX_FRAME = 1 << 31
MAX_WIDE_FRAME = 1 << 40
# The candidate's runner exits with this status, writing nothing, where its reply channel was
# written into or replaced (candidate_runner.main, candidate_process.LoopWatch).
EXIT_CHANNEL_TAMPERED = 86


class ChannelClosed(EOFError):
    """The other end closed the channel (or died) before a whole frame arrived."""


def _read_exactly(fd, n):
    chunks = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise ChannelClosed("channel closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd, wide=False):
    fmt, size, limit = (">Q", 8, MAX_WIDE_FRAME) if wide else (">I", 4, MAX_FRAME)
    (length,) = struct.unpack(fmt, _read_exactly(fd, size))
    if length > limit:
        raise ValueError(f"frame of {length} bytes is over the limit")
    return msgpack.unpackb(_read_exactly(fd, length), raw=False, strict_map_key=False)


def write_frame(fd, obj, wide=False):
    """Writes obj as one frame; returns the frame's length in bytes."""
    payload = msgpack.packb(obj, use_bin_type=True)
    data = struct.pack(">Q" if wide else ">I", len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    return len(data)
