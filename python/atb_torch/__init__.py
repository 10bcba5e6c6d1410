# SPDX-License-Identifier: GPL-3.0-or-later
"""atb_torch: the Python side of atb-runner's torch backend.

atb-runner embeds CPython (libpython loaded at run time) and imports
atb_torch.runner, which loads a KernelBench-format task (class Model,
get_inputs, get_init_inputs) and a candidate (class ModelNew), builds both
models with the same seeded initialisation, and answers the C runner's
calls: correctness facts per seed and input set, and one call of one arm per
timed trial.  Nothing here times anything or decides a verdict: the C timing
core times the calls and atb's gates judge the facts.
"""
