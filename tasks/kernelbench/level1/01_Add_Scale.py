# SPDX-License-Identifier: GPL-3.0-or-later
"""atb KernelBench-format task 01: elementwise a + alpha * b.

Memory-bound: three fp32 tensors of 8 Mi elements (96 MiB moved), about
25 us on an H200 at 4 TB/s, about 15 ms on a laptop CPU core.
atb-suite: small
"""
import torch
import torch.nn as nn

ROWS = 4096
COLS = 2048


class Model(nn.Module):
    """Returns a + alpha * b, alpha fixed at construction."""

    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, a, b):
        return torch.add(a, b, alpha=self.alpha)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [0.75]
