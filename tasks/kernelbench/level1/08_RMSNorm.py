# SPDX-License-Identifier: GPL-3.0-or-later
"""atb KernelBench-format task 08: RMSNorm with a learned scale.

x / sqrt(mean(x^2) + eps) * weight over the last dimension of a
(4096, 4096) fp32 tensor, written out in PyTorch ops (the form most
model code uses), weight a parameter drawn at construction.
"""
import torch
import torch.nn as nn

ROWS = 4096
HIDDEN = 4096


class Model(nn.Module):
    """Returns x * rsqrt(mean(x^2, -1) + eps) * weight."""

    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x):
        inv_rms = torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return x * inv_rms * self.weight


def get_inputs():
    return [torch.randn(ROWS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, 1e-6]
