# SPDX-License-Identifier: GPL-3.0-or-later
# Included into llama.cpp's configure by scripts/install-engine-deps.sh
# (CMAKE_PROJECT_INCLUDE) to shorten the llama-server build on a 2-core box.
# The arithmetic (ggml, ggml-base, ggml-cpu) and the model code (llama) keep
# the Release optimisation; the rest of the server is compiled with less:
# mtmd (images and audio, never used for text) at -O0, the HTTP, JSON, chat
# and argument code at -O1.  A later flag wins, so these override -O3.
set(_atb_o0 "mtmd")
set(_atb_o1 "llama-common;llama-common-base;server-context;llama-server-impl;llama-server;cpp-httplib;llama-ui;vendor-hash")
add_compile_options(
  "$<$<IN_LIST:$<TARGET_PROPERTY:NAME>,${_atb_o0}>:-O0>"
  "$<$<IN_LIST:$<TARGET_PROPERTY:NAME>,${_atb_o1}>:-O1>")
