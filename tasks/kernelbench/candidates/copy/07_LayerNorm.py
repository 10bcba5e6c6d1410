# SPDX-License-Identifier: GPL-3.0-or-later
"""Copy candidate for 07_LayerNorm.py: ModelNew computes exactly what Model does.

Expected to read about 1.00x against PyTorch eager with a confidence
interval covering 1 (the honest no-op candidate).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Returns LayerNorm(hidden, eps)(x) with non-trivial weight and bias."""

    def __init__(self, hidden, eps):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.25, 0.25)

    def forward(self, x):
        return self.norm(x)
