#include "verification.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "wsync/cli/safetensors.hpp"

namespace wsync::demo {

tl::expected<std::uint64_t, std::string> compareWeights(const std::string& expectedPath,
                                                        const std::string& actualPath) {
  auto expected = cli::SafetensorsFile::open(expectedPath);
  if (!expected) return tl::unexpected(expectedPath + ": " + expected.error().describe());
  auto actual = cli::SafetensorsFile::open(actualPath);
  if (!actual) return tl::unexpected(actualPath + ": " + actual.error().describe());
  if (expected->tensors().size() != actual->tensors().size()) {
    return tl::unexpected(std::to_string(actual->tensors().size()) + " tensors, expected " +
                          std::to_string(expected->tensors().size()));
  }
  for (std::size_t index = 0; index < expected->tensors().size(); ++index) {
    const auto& want = expected->tensors()[index];
    if (!(actual->tensors()[index] == want)) {
      return tl::unexpected("tensor " + std::to_string(index) + " is '" + actual->tensors()[index].name +
                            "', expected '" + want.name + "' with the same dtype and shape");
    }
    const auto wantBytes = expected->bytes(index);
    const auto haveBytes = actual->bytes(index);
    if (wantBytes.size() != haveBytes.size() ||
        (!wantBytes.empty() && std::memcmp(wantBytes.data(), haveBytes.data(), wantBytes.size()) != 0)) {
      return tl::unexpected("tensor '" + want.name + "' differs from the trainer's bytes");
    }
  }
  const auto versionOf = [](const cli::SafetensorsFile& file) -> std::string {
    const auto found = file.metadata().find("wsync_version");
    return found == file.metadata().end() ? std::string() : found->second;
  };
  if (versionOf(*expected) != versionOf(*actual)) {
    return tl::unexpected("holds version '" + versionOf(*actual) + "', the trainer's last is '" + versionOf(*expected) +
                          "'");
  }
  try {
    return std::stoull(versionOf(*actual));
  } catch (const std::exception&) {
    return tl::unexpected("no wsync_version in " + actualPath);
  }
}

tl::expected<OutputSummary, std::string> checkOutputs(const std::string& path,
                                                      const std::set<std::uint64_t>& committed) {
  std::ifstream file(path);
  if (!file) return tl::unexpected("cannot read " + path);
  OutputSummary summary;
  std::string line;
  std::uint64_t lineNumber = 0;
  while (std::getline(file, line)) {
    ++lineNumber;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(lineNumber);
    try {
      const auto output = nlohmann::json::parse(line);
      const auto tokens = output.at("tokens").get<std::uint64_t>();
      const auto& spans = output.at("spans");
      if (tokens > 0 && spans.empty()) return tl::unexpected(where + ": tokens without spans");
      std::uint64_t previousFirst = 0;
      std::uint64_t previousVersion = 0;
      for (std::size_t index = 0; index < spans.size(); ++index) {
        const auto first = spans[index].at(0).get<std::uint64_t>();
        const auto version = spans[index].at(1).get<std::uint64_t>();
        if (index == 0 && first != 0)
          return tl::unexpected(where + ": the first span starts at token " + std::to_string(first));
        if (index > 0 && first <= previousFirst) return tl::unexpected(where + ": span first tokens do not increase");
        if (first >= tokens) return tl::unexpected(where + ": a span starts past the output's end");
        if (index > 0 && version <= previousVersion) return tl::unexpected(where + ": versions do not increase");
        if (version != 0 && !committed.contains(version)) {
          return tl::unexpected(where + ": version " + std::to_string(version) + " was never committed");
        }
        previousFirst = first;
        previousVersion = version;
        summary.versions.insert(version);
      }
      ++summary.outputs;
      summary.tokens += tokens;
      if (spans.size() > 1) ++summary.straddling;
      if (output.value("aborted", false)) ++summary.aborted;
    } catch (const nlohmann::json::exception& error) {
      return tl::unexpected(where + ": " + error.what());
    }
  }
  return summary;
}

}  // namespace wsync::demo
