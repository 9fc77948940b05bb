#pragma once
// Private to bus/: checks shared by every shared-memory segment the bus maps (control block, arenas).
#include <cstdint>
#include <string>

#include <boost/interprocess/shared_memory_object.hpp>
#include <tl/expected.hpp>

namespace wsync::bus::detail {

struct SegmentProblem {
  bool unsafe;         // owned by another user or open to others; otherwise an operating-system failure
  std::string detail;  // names the segment
};

// The segment's size, if it belongs to this user and nobody else may open it: any process that can map a bus
// segment can stop the bus or feed workers forged bytes.
tl::expected<std::uint64_t, SegmentProblem> privateSegmentSize(const boost::interprocess::shared_memory_object& shm,
                                                               const std::string& name);

}  // namespace wsync::bus::detail
