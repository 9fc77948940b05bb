#include "core/private_segment.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace wsync::bus::detail {

tl::expected<std::uint64_t, SegmentProblem> privateSegmentSize(const boost::interprocess::shared_memory_object& shm,
                                                               const std::string& name) {
  struct stat info {};
  if (::fstat(shm.get_mapping_handle().handle, &info) != 0) {
    return tl::unexpected(SegmentProblem{false, name + ": fstat: " + std::strerror(errno)});
  }
  if (info.st_uid != ::geteuid()) {
    return tl::unexpected(SegmentProblem{true, name + " belongs to uid " + std::to_string(info.st_uid)});
  }
  if ((info.st_mode & 077) != 0) return tl::unexpected(SegmentProblem{true, name + " is open to other users"});
  return static_cast<std::uint64_t>(info.st_size);
}

}  // namespace wsync::bus::detail
