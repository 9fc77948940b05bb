#pragma once
#include <cstdint>
#include <string_view>

#include "wsync/bus/core/failure.hpp"

namespace wsync::worker_agent {

// Why the worker agent could not start, or why it refused something. The Failure's detail names the tensor, the
// option or the coordinator's answer.
enum class WorkerError : std::uint8_t {
  InvalidOptions,    // an option or hook is missing or out of range
  InvalidBinding,    // a bound tensor is malformed (bad name, dtype or shape, wrong span size, duplicate name) or
                     // its memory overlaps another binding's, of this worker or of another in this process
  ManifestMismatch,  // a manifest disagrees with the bindings (names, dtypes, shapes or counts)
  Registration,      // the session could not be opened or the coordinator did not welcome us
};

std::string_view toString(WorkerError error);

using WorkerFailure = bus::Failure<WorkerError>;

}  // namespace wsync::worker_agent
