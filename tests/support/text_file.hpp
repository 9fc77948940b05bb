#pragma once
// Test support: the whole content of a file a test's child process wrote (its output, its log).
#include <cstddef>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

namespace wsync::test {

// Empty when the file does not exist (yet).
inline std::string readTextFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// How many times `needle` occurs in `text` (a log line said again after a restart, say).
inline std::size_t occurrences(std::string_view text, std::string_view needle) {
  std::size_t count = 0;
  for (auto at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + needle.size())) ++count;
  return count;
}

}  // namespace wsync::test
