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
find_package(nlohmann_json 3 REQUIRED)                         # nlohmann-json3-dev: safetensors headers
find_package(Threads REQUIRED)
if(WSYNC_TESTS)
  find_package(GTest REQUIRED CONFIG)                          # libgtest-dev, libgmock-dev
endif()

# The GPU channels need the CUDA runtime and NCCL; without them everything else still builds.
set(WSYNC_HAVE_CUDA OFF)
if(NOT WSYNC_CUDA STREQUAL "OFF")
  set(CUDAToolkit_ROOT "${WSYNC_CUDA_ROOT}")
  find_package(CUDAToolkit QUIET)
  find_library(NCCL_LIBRARY nccl HINTS "${WSYNC_CUDA_ROOT}/lib64" "${WSYNC_CUDA_ROOT}/lib")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS "${WSYNC_CUDA_ROOT}/include")
  if(CUDAToolkit_FOUND AND NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
    set(WSYNC_HAVE_CUDA ON)
  elseif(WSYNC_CUDA STREQUAL "ON")
    message(FATAL_ERROR "WSYNC_CUDA=ON but the CUDA Toolkit or NCCL was not found under ${WSYNC_CUDA_ROOT}")
  endif()
endif()
