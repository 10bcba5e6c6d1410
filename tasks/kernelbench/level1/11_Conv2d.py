# SPDX-License-Identifier: GPL-3.0-or-later
"""atb KernelBench-format task 11: 3x3 convolution with bias.

A batch of 8 images, 32 -> 64 channels, 56 x 56, stride 1, padding 1:
about 0.9 GFLOP, the shape of an early ResNet stage at a small batch.
"""
import torch
import torch.nn as nn

BATCH = 8
C_IN = 32
C_OUT = 64
SIZE = 56


class Model(nn.Module):
    """Returns Conv2d(c_in, c_out, 3, padding=1)(x)."""

    def __init__(self, c_in, c_out, kernel):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2, bias=True)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT, 3]
