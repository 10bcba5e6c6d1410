# SPDX-License-Identifier: GPL-3.0-or-later
"""atb KernelBench-format task 09: square matrix multiplication.

C = A B with A, B (1024, 1024) fp32: 2.1 GFLOP, about 40 us on an H200
(fp32, TF32 off) and a few tens of ms on a CPU.  Each output is a
reduction of length 1024.
"""
import torch
import torch.nn as nn

N = 1024


class Model(nn.Module):
    """Returns A @ B."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
