# SPDX-License-Identifier: GPL-3.0-or-later
"""atb KernelBench-format task 03: GELU (exact, erf form).

16 Mi fp32 elements in and out of a normal distribution; memory-bound on
a GPU (about 30 us on an H200), compute-bound on a CPU (erf per element).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 4096
COLS = 4096


class Model(nn.Module):
    """Returns x * Phi(x), Phi the standard normal CDF."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
