# Warnings and sanitizers, applied per target so that generated and third-party code keeps its own flags.
# C++ sources only: nvcc compiles the CUDA kernels with its own flags (see wsync_cuda_defaults).
function(wsync_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
                              -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough>)
  # Not -Wnull-dereference: at -O2 it fires inside inlined FlatBuffers accessors, where it cannot be acted on.
  if(WSYNC_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  # CUDA sources: warnings of the host compiler and of nvcc itself, as errors with WSYNC_WERROR.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
  if(WSYNC_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
endfunction()

if(WSYNC_SANITIZE)
  # Host C++ only: nvcc's device code cannot be instrumented (its host stubs then simply run unsanitised). The
  # commas of "address,undefined" would split the generator expression: $<COMMA> keeps them.
  string(REPLACE "," "$<COMMA>" wsync_sanitize_flag "-fsanitize=${WSYNC_SANITIZE}")
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${wsync_sanitize_flag};-fno-omit-frame-pointer;-fno-sanitize-recover=all>")
  # Sanitizer builds exist to run the tests. Outside Debug they build at -O1 with line tables only (-g1): the
  # reports keep their stacks, functions and lines, and GCC 12 compiles the instrumented code in less than half the
  # time of -O2 -g (a test file: 74 s against 31 s), which is most of CI's ASan/UBSan stage. Later flags win, so
  # these override the build type's -O2 -g.
  add_compile_options("$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<NOT:$<CONFIG:Debug>>>:-O1;-g1>")
  if(WSYNC_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC warns that TSan does not model atomic_thread_fence. The one fence left (the shm arena's copy re-check)
    # orders a copy that only races after an abort, which the re-check detects; normal runs synchronise through
    # acquire/release tickets that TSan does see.
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-tsan>)
  endif()
  if(WSYNC_SANITIZE MATCHES "address" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 with ASan reports maybe-uninitialized inside libstdc++'s own <regex> automaton (std::function moved
    # out of a _StateT temporary), in every test that builds a std::regex: a false positive in library code that
    # nothing here can act on, and that the plain build (no ASan) does not see.
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
  endif()
  add_link_options(-fsanitize=${WSYNC_SANITIZE})
endif()
