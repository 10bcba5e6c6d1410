# SPDX-License-Identifier: GPL-3.0-or-later
"""atb KernelBench-format task 06: softmax over the last dimension.

(4096, 4096) fp32 logits from a normal distribution scaled by 3, so rows
have a clear maximum and a naive exp without the max shift still fits in
fp32 here but not on the protocol's large-magnitude variant.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 4096
COLS = 4096


class Model(nn.Module):
    """Returns softmax(x, dim=-1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 3.0]


def get_init_inputs():
    return []
