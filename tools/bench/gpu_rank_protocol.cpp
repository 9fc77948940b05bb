#include "gpu_rank_protocol.hpp"

#include <charconv>
#include <sstream>

#include "bench_failure.hpp"

namespace wsync::bench {
namespace {

template <typename Number>
Number parseNumber(const RankLine& line, const std::string& key) {
  const auto found = line.fields.find(key);
  if (found == line.fields.end()) throw BenchFailure("'" + line.word + "' report without " + key);
  const std::string& text = found->second;
  Number value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw BenchFailure("'" + line.word + "' report: " + key + "=" + text + " is not a number");
  }
  return value;
}

}  // namespace

std::uint64_t RankLine::number(const std::string& key) const { return parseNumber<std::uint64_t>(*this, key); }
std::int64_t RankLine::signedNumber(const std::string& key) const { return parseNumber<std::int64_t>(*this, key); }

RankLine parseRankLine(const std::string& line, const std::string& from) {
  RankLine parsed;
  std::istringstream words(line);
  if (!(words >> parsed.word)) throw BenchFailure(from + " sent an empty line");
  if (parsed.word == "nomemory") {
    std::getline(words >> std::ws, parsed.text);
    return parsed;
  }
  std::string field;
  while (words >> field) {
    const auto equals = field.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw BenchFailure(from + " sent '" + line + "': '" + field + "' is not key=value");
    }
    parsed.fields[field.substr(0, equals)] = field.substr(equals + 1);
  }
  return parsed;
}

std::string formatRankLine(const std::string& word, const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string line = word;
  for (const auto& [key, value] : fields) line += " " + key + "=" + value;
  return line;
}

}  // namespace wsync::bench
