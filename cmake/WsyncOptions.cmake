# The build's options, all in one place.
option(WSYNC_TESTS "Build the GoogleTest suites and register them with ctest" ON)
option(WSYNC_WERROR "Treat compiler warnings as errors" OFF)
option(WSYNC_INSTALL "Install rules for a relocatable prefix (cmake --install): programs, bundled libraries, headers" ON)
option(WSYNC_FUZZ "Build libFuzzer targets (needs clang); their corpora run as plain tests either way" OFF)

# `cmake --install BUILD --component python` (the Python package's build): libwsync.so and wsync-coordinator go to
# lib/ and bin/ under this folder of the prefix, which the package's build sets to where it loads them from.
set(WSYNC_PYTHON_NATIVE_DIR "wsync/_native" CACHE STRING "Install folder of the python component, under the prefix")

set(WSYNC_SANITIZE "" CACHE STRING "Sanitizers to build with: '', 'address,undefined' or 'thread'")
set_property(CACHE WSYNC_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

set(WSYNC_CUDA "AUTO" CACHE STRING "GPU payload channels: AUTO (when CUDA and NCCL are found), ON (required), OFF")
set_property(CACHE WSYNC_CUDA PROPERTY STRINGS AUTO ON OFF)
set(WSYNC_CUDA_ROOT "/usr/local/cuda" CACHE PATH "Where the CUDA Toolkit and NCCL are looked for")
# Ampere (sm_80) and Hopper (sm_90) machine code; other GPUs JIT-compile the embedded PTX of the newest.
set(CMAKE_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "GPU architectures the CUDA kernels are built for")

if(NOT WSYNC_SANITIZE MATCHES "^(|address,undefined|address|undefined|thread)$")
  message(FATAL_ERROR "WSYNC_SANITIZE='${WSYNC_SANITIZE}': use '', 'address,undefined' or 'thread'")
endif()
if(WSYNC_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "WSYNC_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: configure a separate "
                      "build folder with CC=clang CXX=clang++, or leave WSYNC_FUZZ off (the corpora still run as tests)")
endif()
if(WSYNC_FUZZ AND NOT WSYNC_TESTS)
  message(FATAL_ERROR "WSYNC_FUZZ=ON needs WSYNC_TESTS=ON: the fuzz targets live in tests/fuzz")
endif()
if(NOT WSYNC_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "WSYNC_CUDA='${WSYNC_CUDA}': use AUTO, ON or OFF")
endif()
