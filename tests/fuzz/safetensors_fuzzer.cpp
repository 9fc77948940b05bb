// Fuzz target: the safetensors reader (SafetensorsFile::open), on the input as a file (an anonymous memfd, opened
// by its /proc path like any checkpoint). Whatever the bytes, the reader either refuses them with a named error or
// hands out tensors whose byte spans have exactly the size their dtype and shape give, all of which can be read
// (a span reaching past the mapped file would crash here, under ASan or with SIGBUS), and metadata strings.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/cli/safetensors.hpp"

namespace {

namespace bus = wsync::bus;
namespace cli = wsync::cli;

// A file holding `size` bytes, closed when this goes out of scope.
class MemoryFile {
 public:
  MemoryFile(const std::uint8_t* data, std::size_t size) : fd_(::memfd_create("wsync-fuzz-safetensors", MFD_CLOEXEC)) {
    WSYNC_FUZZ_CHECK(fd_ >= 0);
    std::size_t written = 0;
    while (written < size) {
      const ssize_t step = ::write(fd_, data + written, size - written);
      WSYNC_FUZZ_CHECK(step > 0);
      written += static_cast<std::size_t>(step);
    }
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile() { ::close(fd_); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const MemoryFile file(data, size);
  auto opened = cli::SafetensorsFile::open(file.path());
  if (!opened) {
    WSYNC_FUZZ_CHECK(!opened.error().describe().empty());
    return 0;
  }
  std::uint64_t fold = 0;
  const auto& tensors = opened->tensors();
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    const bus::TensorSpec& tensor = tensors[index];
    WSYNC_FUZZ_CHECK(!tensor.name.empty());
    std::uint64_t expected = bus::elementBytes(tensor.dtype);
    WSYNC_FUZZ_CHECK(expected > 0);
    for (const std::int64_t dimension : tensor.shape) {
      WSYNC_FUZZ_CHECK(dimension >= 0);
      // An accepted tensor's byte count never overflows.
      WSYNC_FUZZ_CHECK(!__builtin_mul_overflow(expected, static_cast<std::uint64_t>(dimension), &expected));
    }
    const auto bytes = opened->bytes(index);
    WSYNC_FUZZ_CHECK(bytes.size() == expected);
    for (const std::byte value : bytes) fold = fold * 31 + static_cast<std::uint8_t>(value);
  }
  for (const auto& [key, value] : opened->metadata()) fold += key.size() + value.size();
  // A checkpoint the reader accepts is either a valid manifest or refused as one, by name.
  if (const auto manifest = bus::Manifest::create(tensors); !manifest) {
    WSYNC_FUZZ_CHECK(!manifest.error().describe().empty());
  }
  // Keeps the reads above from being optimised away.
  volatile std::uint64_t sink = fold;
  (void)sink;
  return 0;
}
