#pragma once
// Test support: the whole content of a file a test's child process wrote (its output, its log).
#include <fstream>
#include <iterator>
#include <string>

namespace wsync::test {

// Empty when the file does not exist (yet).
inline std::string readTextFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

}  // namespace wsync::test
