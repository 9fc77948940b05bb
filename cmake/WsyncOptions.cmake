# The build's options, all in one place.
option(WSYNC_TESTS "Build the GoogleTest suites and register them with ctest" ON)
option(WSYNC_WERROR "Treat compiler warnings as errors" OFF)
option(WSYNC_FUZZ "Build libFuzzer targets (needs clang); their corpora run as plain tests either way" OFF)

set(WSYNC_SANITIZE "" CACHE STRING "Sanitizers to build with: '', 'address,undefined' or 'thread'")
set_property(CACHE WSYNC_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

set(WSYNC_CUDA "AUTO" CACHE STRING "GPU payload channels: AUTO (when CUDA and NCCL are found), ON (required), OFF")
set_property(CACHE WSYNC_CUDA PROPERTY STRINGS AUTO ON OFF)
set(WSYNC_CUDA_ROOT "/usr/local/cuda" CACHE PATH "Where the CUDA Toolkit and NCCL are looked for")

if(NOT WSYNC_SANITIZE MATCHES "^(|address,undefined|address|undefined|thread)$")
  message(FATAL_ERROR "WSYNC_SANITIZE='${WSYNC_SANITIZE}': use '', 'address,undefined' or 'thread'")
endif()
if(NOT WSYNC_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "WSYNC_CUDA='${WSYNC_CUDA}': use AUTO, ON or OFF")
endif()
