// Replays a fuzz corpus without libFuzzer, with any compiler: every file named on the command line, or found
// under a folder named there, goes once through LLVMFuzzerTestOneInput. This is how the corpora run in the
// normal test run (ctest -L fuzz); an input that breaks an invariant aborts the program.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

// Regular files among `paths`, folders searched recursively, sorted so that every run replays the same order.
std::optional<std::vector<fs::path>> collectInputs(const std::vector<std::string>& paths) {
  std::vector<fs::path> inputs;
  for (const std::string& path : paths) {
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (!fs::exists(status)) {
      std::fprintf(stderr, "corpus_runner: no such file or folder: %s\n", path.c_str());
      return std::nullopt;
    }
    if (!fs::is_directory(status)) {
      inputs.emplace_back(path);
      continue;
    }
    for (fs::recursive_directory_iterator entry(path, error), end; !error && entry != end; entry.increment(error)) {
      if (entry->is_regular_file(error)) inputs.push_back(entry->path());
    }
    if (error) {
      std::fprintf(stderr, "corpus_runner: cannot list %s: %s\n", path.c_str(), error.message().c_str());
      return std::nullopt;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  return inputs;
}

std::optional<std::vector<std::uint8_t>> readFile(const fs::path& path) {
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  if (error) return std::nullopt;
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  std::ifstream file(path, std::ios::binary);
  file.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!file) return std::nullopt;
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  // The same positional interface as a libFuzzer binary given files; nothing else to parse.
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  const std::vector<std::string> paths(argv + 1, argv + argc);

  const auto maybeInputs = collectInputs(paths);
  if (!maybeInputs) return 1;
  // An empty corpus means a wrong path or a lost folder, not a pass.
  if (maybeInputs->empty()) {
    std::fprintf(stderr, "corpus_runner: no input files found\n");
    return 1;
  }

  std::size_t totalBytes = 0;
  for (const fs::path& input : *maybeInputs) {
    const auto maybeBytes = readFile(input);
    if (!maybeBytes) {
      std::fprintf(stderr, "corpus_runner: cannot read %s\n", input.c_str());
      return 1;
    }
    // Named before it runs, so that the input behind a crash is the last one printed.
    std::fprintf(stderr, "Running: %s (%zu bytes)\n", input.c_str(), maybeBytes->size());
    LLVMFuzzerTestOneInput(maybeBytes->data(), maybeBytes->size());
    totalBytes += maybeBytes->size();
  }
  std::printf("corpus_runner: ran %zu inputs (%zu bytes)\n", maybeInputs->size(), totalBytes);
  return 0;
}
