# SPDX-License-Identifier: GPL-3.0-or-later
"""atb KernelBench-format task 10: batched matrix multiplication.

32 independent (256, 384) x (384, 256) fp32 products (1.6 GFLOP): small
matrices where launch and tiling choices matter more than in task 09.
"""
import torch
import torch.nn as nn

BATCH = 32
M = 256
K = 384
N = 256


class Model(nn.Module):
    """Returns torch.bmm(a, b)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []
