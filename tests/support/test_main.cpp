// main() of every test binary: isolates its runtime folder before any test runs.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "test_environment.hpp"

int main(int argc, char** argv) {
  wsync::test::useTemporaryRuntimeDirectory();
  // Tests read the info lines of the programs they start ("registered ... (another host"), so the caller's level
  // must not reach them: WSYNC_LOG_LEVEL=warn in a shell once failed a GPU test whose programs all did their work.
  // A test of the variable sets it itself.
  ::unsetenv("WSYNC_LOG_LEVEL");
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
