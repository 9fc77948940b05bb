#pragma once
// Test support: the last lines of every log a failed test's child processes wrote, printed before the test's
// folder (and with it the logs) is removed. On CI they are the only trace of what the programs saw.
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "text_file.hpp"

namespace wsync::test {

// Enough lines to show a round's phases and the shutdown, few enough to keep CI's output tail readable.
inline constexpr std::size_t kLogTailLines = 25;

inline void printLogTails(const std::string& directory, std::size_t lines = kLogTailLines) {
  std::vector<std::filesystem::path> logs;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    if (entry.path().extension() == ".log") logs.push_back(entry.path());
  }
  std::sort(logs.begin(), logs.end());
  for (const auto& log : logs) {
    const std::string text = readTextFile(log.string());
    std::size_t start = text.size();
    for (std::size_t seen = 0; start > 0 && seen <= lines; --start) {
      if (text[start - 1] == '\n') ++seen;
    }
    if (start > 0) ++start;  // past the newline that ended the line before the tail
    std::cerr << "---- last lines of " << log.filename().string() << " ----\n" << text.substr(start);
  }
}

}  // namespace wsync::test
