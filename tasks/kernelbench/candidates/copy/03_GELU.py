# SPDX-License-Identifier: GPL-3.0-or-later
"""Copy candidate for 03_GELU.py: ModelNew computes exactly what Model does.

Expected to read about 1.00x against PyTorch eager with a confidence
interval covering 1 (the honest no-op candidate).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """Returns x * Phi(x), Phi the standard normal CDF."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)
