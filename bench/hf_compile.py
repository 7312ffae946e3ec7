"""Shared by the transformers peers (hf_train.py, hf_infer.py): torch.compile when asked and available."""
import sys

import torch


def maybe_compile(model, want):
    """(the callable to run, whether it is compiled); eager, with the reason on stderr, when compile fails."""
    if not want:
        return model, False
    try:
        return torch.compile(model), True
    except Exception as e:  # noqa: BLE001 - report, run eager
        print("torch.compile unavailable: %s" % e, file=sys.stderr)
        return model, False
