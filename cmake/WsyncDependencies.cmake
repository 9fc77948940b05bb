# Every dependency comes from a Debian package (tools/install-deps.sh installs them); CUDA and NCCL are optional.
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq>=4.3)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash>=0.8)     # libxxhash-dev: XXH3-128 digests
find_path(CPPZMQ_INCLUDE_DIR zmq.hpp REQUIRED)                 # cppzmq-dev (header only)
find_package(FlatBuffers REQUIRED CONFIG)                      # libflatbuffers-dev (headers only are used)
find_program(FLATC_EXECUTABLE flatc REQUIRED)                  # flatbuffers-compiler
find_package(Boost 1.74 REQUIRED)                              # libboost-dev: Boost.Interprocess is header only
find_package(tl-expected REQUIRED CONFIG)                      # libexpected-dev
find_package(CLI11 REQUIRED CONFIG)                            # libcli11-dev
find_package(spdlog 1.10 REQUIRED CONFIG)                      # libspdlog-dev: structured logs (log.hpp)
find_package(nlohmann_json 3 REQUIRED)                         # nlohmann-json3-dev: safetensors headers, JSON lines
# libcpp-httplib-dev: wsync-mon's /metrics. Debian builds it as a library with TLS and compression, unused here.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib>=0.11)
find_package(Threads REQUIRED)
if(WSYNC_TESTS)
  find_package(GTest REQUIRED CONFIG)                          # libgtest-dev, libgmock-dev
endif()

# The GPU channels need the CUDA Toolkit (nvcc, the static runtime) and NCCL's header; NCCL itself is loaded at run
# time. Without them everything else still builds. Fuzz builds (clang) leave them out.
set(WSYNC_HAVE_CUDA OFF)
if(NOT WSYNC_CUDA STREQUAL "OFF" AND NOT WSYNC_FUZZ)
  set(CUDAToolkit_ROOT "${WSYNC_CUDA_ROOT}")
  # Debian 12's CMake 3.25.1 marks CUDA::nvToolsExt deprecated without checking that the target exists, and CUDA
  # 12.9 and later ship no nvToolsExt: configuring fails ("set_property could not find TARGET CUDA::nvToolsExt").
  # 3.25.2 fixed it; the faulty line only runs for projects that require 3.25, so the search is made as for 3.24.
  set(_wsync_minimum_required "${CMAKE_MINIMUM_REQUIRED_VERSION}")
  set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  find_package(CUDAToolkit QUIET)
  set(CMAKE_MINIMUM_REQUIRED_VERSION "${_wsync_minimum_required}")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS "${WSYNC_CUDA_ROOT}/include")
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}")
    set(WSYNC_HAVE_CUDA ON)
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
    set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}")
    enable_language(CUDA)
    # CMake 3.25 predates nvcc 13 and does not know how to ask it for C++20: tell it.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  elseif(WSYNC_CUDA STREQUAL "ON")
    message(FATAL_ERROR "WSYNC_CUDA=ON but the CUDA Toolkit or NCCL was not found under ${WSYNC_CUDA_ROOT}")
  endif()
endif()
