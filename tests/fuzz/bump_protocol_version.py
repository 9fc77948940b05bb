#!/usr/bin/env python3
"""Moves the fuzz-found inputs of corpus/decode (named by SHA-1) to another protocol version.

After kProtocolVersion changes, every input of the old version is refused at the envelope's version check and no
longer reaches the decoder behind it. This rewrites Envelope.protocol_version (field 0 of the root table) in place
wherever the input's root and vtable can be followed and the field holds one of the OLD versions, and renames the
file to its new SHA-1. The seeds are written again by wsync_make_decode_corpus instead.

    tests/fuzz/bump_protocol_version.py tests/fuzz/corpus/decode NEW OLD [OLD...]
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import sys


def bump(folder: str, new: int, old: set[int]) -> int:
    moved = 0
    for name in sorted(os.listdir(folder)):
        if not re.fullmatch(r"[0-9a-f]{40}", name):
            continue
        data = bytearray(open(os.path.join(folder, name), "rb").read())
        try:
            root = struct.unpack_from("<I", data, 0)[0]
            vtable = root - struct.unpack_from("<i", data, root)[0]
            if vtable < 0 or struct.unpack_from("<H", data, vtable)[0] < 6:
                continue
            field = struct.unpack_from("<H", data, vtable + 4)[0]
            if field == 0 or struct.unpack_from("<H", data, root + field)[0] not in old:
                continue
        except struct.error:  # an input whose offsets lead outside it
            continue
        struct.pack_into("<H", data, root + field, new)
        os.remove(os.path.join(folder, name))
        with open(os.path.join(folder, hashlib.sha1(bytes(data)).hexdigest()), "wb") as out:
            out.write(data)
        moved += 1
    return moved


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    count = bump(sys.argv[1], int(sys.argv[2]), {int(version) for version in sys.argv[3:]})
    print(f"{count} inputs moved to protocol {sys.argv[2]}")
