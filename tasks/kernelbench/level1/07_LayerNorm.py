# SPDX-License-Identifier: GPL-3.0-or-later
"""atb KernelBench-format task 07: LayerNorm with a learned affine.

(4096, 2048) fp32 rows normalised over the last dimension; weight and
bias are parameters (seeded initialisation, then perturbed so they are not
the trivial ones and one plus zero).
"""
import torch
import torch.nn as nn

ROWS = 4096
HIDDEN = 2048


class Model(nn.Module):
    """Returns LayerNorm(hidden, eps)(x) with non-trivial weight and bias."""

    def __init__(self, hidden, eps):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.25, 0.25)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(ROWS, HIDDEN) * 2.0 + 0.5]


def get_init_inputs():
    return [HIDDEN, 1e-5]
