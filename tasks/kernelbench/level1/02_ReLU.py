# SPDX-License-Identifier: GPL-3.0-or-later
"""atb KernelBench-format task 02: ReLU on inputs drawn from [0, 1).

The generator is deliberately degenerate: torch.rand draws only from
[0, 1), where ReLU is the identity, so a candidate that returns its input
looks correct on these inputs.  This is the paper's 61,000x "ReLU
identity" trap; atb's correctness gate must refuse it on the protocol's
signed input variants.  16 Mi fp32 elements in and out (128 MiB moved).
atb-suite: small
"""
import torch
import torch.nn as nn

ROWS = 4096
COLS = 4096


class Model(nn.Module):
    """Returns max(x, 0)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(ROWS, COLS)]


def get_init_inputs():
    return []
