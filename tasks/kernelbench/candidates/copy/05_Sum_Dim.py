# SPDX-License-Identifier: GPL-3.0-or-later
"""Copy candidate for 05_Sum_Dim.py: ModelNew computes exactly what Model does.

Expected to read about 1.00x against PyTorch eager with a confidence
interval covering 1 (the honest no-op candidate).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Returns x.sum(dim, keepdim=True)."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)
