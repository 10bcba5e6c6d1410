# SPDX-License-Identifier: GPL-3.0-or-later
"""atb KernelBench-format task 05: sum over one dimension, kept.

A (8192, 4096) fp32 tensor summed over dim 1 into (8192, 1): 128 MiB read,
a row reduction of length 4096 (summation order changes the rounding, so
the protocol's fp32 tolerance applies).
atb-suite: small
"""
import torch
import torch.nn as nn

ROWS = 8192
COLS = 4096


class Model(nn.Module):
    """Returns x.sum(dim, keepdim=True)."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    return [torch.rand(ROWS, COLS) - 0.5]


def get_init_inputs():
    return [1]
