"""msgpack maps framed by a 4-byte big-endian length, over raw file descriptors."""
import os
import struct

import msgpack

MAX_FRAME = 1 << 31


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


def read_frame(fd):
    (length,) = struct.unpack(">I", _read_exactly(fd, 4))
    if length > MAX_FRAME:
        raise ValueError(f"frame of {length} bytes is over the limit")
    return msgpack.unpackb(_read_exactly(fd, length), raw=False, strict_map_key=False)


def write_frame(fd, obj):
    payload = msgpack.packb(obj, use_bin_type=True)
    data = struct.pack(">I", len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
