// main() of every test binary: isolates its runtime folder before any test runs.
#include <gtest/gtest.h>

#include "test_environment.hpp"

int main(int argc, char** argv) {
  wsync::test::useTemporaryRuntimeDirectory();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
