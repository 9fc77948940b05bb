#pragma once
// The invariant check of the fuzz targets: aborts (a crash to libFuzzer, a failure to ctest) when it does not hold.
#include <cstdio>
#include <cstdlib>

namespace wsync::fuzz {

[[noreturn]] inline void failInvariant(const char* file, int line, const char* invariant) {
  std::fprintf(stderr, "%s:%d: invariant violated: %s\n", file, line, invariant);
  std::abort();
}

}  // namespace wsync::fuzz

#define WSYNC_FUZZ_CHECK(condition) \
  ((condition) ? static_cast<void>(0) : ::wsync::fuzz::failInvariant(__FILE__, __LINE__, #condition))
