#pragma once
// Test support: isolation between tests that run in parallel (ctest -j) and from any real bus on the machine.
#include <string>

namespace wsync::test {

// A bus name no other test process uses: "<prefix>-<pid>-<n>". Its control-block segment, if a killed helper left
// one, is removed when the test process exits.
std::string uniqueBusName(const std::string& prefix);

// Points WSYNC_RUNTIME_DIR at a fresh private folder for this test process (children inherit it) and removes it
// at exit. Call once, before any bus is created; returns the folder.
const std::string& useTemporaryRuntimeDirectory();

}  // namespace wsync::test
