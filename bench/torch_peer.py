"""Shared setup of the PyTorch peers: the reference model (tests/reference/hyla_ref.py) in
float32 with a given thread count."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import torch  # noqa: E402

import hyla_ref  # noqa: E402


def load_fp32(model_dir, threads):
    torch.set_num_threads(threads)
    hyla_ref.DT = torch.float32
    torch.set_default_dtype(torch.float32)
    return hyla_ref.HylaRef(model_dir, check_delta=False, dtype=torch.float32)
