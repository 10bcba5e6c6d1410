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

# mtmd's ~50 files compile as a few unity files (header parsing dominates at
# -O0); set once the whole tree is configured, when the target exists.
function(_atb_unity)
  if(TARGET mtmd)
    set_target_properties(mtmd PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
    # the helper files refuse to see mtmd's internal headers
    get_target_property(_srcs mtmd SOURCES)
    get_target_property(_dir mtmd SOURCE_DIR)
    foreach(_s IN LISTS _srcs)
      if(_s MATCHES "mtmd-helper")
        if(NOT IS_ABSOLUTE "${_s}")
          set(_s "${_dir}/${_s}")
        endif()
        set_source_files_properties("${_s}" TARGET_DIRECTORY mtmd
                                    PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      endif()
    endforeach()
  endif()
endfunction()
if(NOT _atb_unity_deferred AND CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
  set(_atb_unity_deferred ON)
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _atb_unity)
endif()
