#!/usr/bin/env python3
"""Write a deliberately broken copy of a safetensors file (for the bad-input CLI tests).

usage: corrupt_safetensors.py SRC DST KIND [TENSOR]
KIND: truncate | header_past_eof | bad_json | bad_dtype | overlap | span_mismatch |
      transpose_shape | drop_tensor | extra_tensor
Plain Python (no torch): reads the header, edits it, rewrites the file."""
import json
import struct
import sys


def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return header, raw[8 + n:]


def write(path, header, data):
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)


def main():
    src, dst, kind = sys.argv[1:4]
    raw = open(src, "rb").read()
    header, data = read(src)
    names = [k for k in header if k != "__metadata__"]
    name = sys.argv[4] if len(sys.argv) > 4 else names[0]
    if kind == "truncate":
        open(dst, "wb").write(raw[: len(raw) - len(data) // 2 - 1])
        return
    if kind == "header_past_eof":
        open(dst, "wb").write(struct.pack("<Q", len(raw) * 4) + raw[8:])
        return
    if kind == "bad_json":
        (n,) = struct.unpack("<Q", raw[:8])
        open(dst, "wb").write(raw[:8] + b"{" + b"x" * (n - 1) + raw[8 + n:])
        return
    t = header[name]
    if kind == "bad_dtype":
        t["dtype"] = "Q7"
    elif kind == "overlap":
        other = [k for k in names if k != name][0]
        header[other]["data_offsets"] = list(t["data_offsets"])
        header[other]["shape"] = list(t["shape"])
        header[other]["dtype"] = t["dtype"]
    elif kind == "span_mismatch":
        t["shape"] = [t["shape"][0] + 1] + t["shape"][1:]
    elif kind == "transpose_shape":
        t["shape"] = list(reversed(t["shape"]))
    elif kind == "drop_tensor":
        del header[name]
    elif kind == "extra_tensor":
        end = len(data)
        header["model.layers.0.unexpected.weight"] = {"dtype": "F32", "shape": [2], "data_offsets": [end, end + 8]}
        data = data + b"\0" * 8
    else:
        sys.exit("unknown kind " + kind)
    write(dst, header, data)


main()
