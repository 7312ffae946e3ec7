# Golden dequantization values for every ggml block type hyla reads, made by the `gguf` package's
# own numpy dequantizers (an implementation independent of hyla's C): random blocks (random bytes,
# with the f16 scales replaced by moderate random values so every value is finite), and the floats
# gguf.quants.dequantize gives for them. tests/test_quant.c checks hyla_ggml_to_f32 against them.
#
# usage: .venv/bin/python tests/gguf/make_dequant_golden.py tests/data/ggml_dequant_golden.bin
# File: per type, u32 ggml type, u32 value count n, the blocks' bytes, n float32 values.
import struct, sys

import gguf
import numpy as np

T = gguf.GGMLQuantizationType
# (type, byte offsets of its f16 scales within a block)
TYPES = [(T.Q8_0, [0]), (T.Q4_0, [0]), (T.Q4_1, [0, 2]), (T.Q5_0, [0]), (T.Q5_1, [0, 2]), (T.IQ4_NL, [0]),
         (T.Q4_K, [0, 2]), (T.Q5_K, [0, 2]), (T.Q6_K, [208]), (T.F16, []), (T.BF16, []),
         (T.Q2_K, [80, 82]), (T.Q3_K, [108]), (T.IQ4_XS, [0])]
rng = np.random.default_rng(20261203)
out = open(sys.argv[1], "wb")
for t, scales in TYPES:
    bv, bb = gguf.GGML_QUANT_SIZES[t]
    blocks = 4 if bv == 256 else 16 if bv == 32 else 128
    raw = rng.integers(0, 256, size=(blocks, bb), dtype=np.uint8)
    if t == T.F16:
        raw = rng.standard_normal(blocks).astype(np.float16).view(np.uint8).reshape(blocks, bb)
    if t == T.BF16:
        f = rng.standard_normal(blocks).astype(np.float32).view(np.uint32) >> 16
        raw = f.astype(np.uint16).view(np.uint8).reshape(blocks, bb)
    for off in scales:
        raw[:, off:off + 2] = (rng.uniform(-0.05, 0.05, blocks).astype(np.float16)).view(np.uint8).reshape(blocks, 2)
    vals = gguf.quants.dequantize(raw.reshape(-1), t).astype(np.float32).reshape(-1)
    assert vals.size == blocks * bv and np.isfinite(vals).all()
    out.write(struct.pack("<II", int(t), vals.size))
    out.write(raw.tobytes())
    out.write(vals.tobytes())
out.close()
