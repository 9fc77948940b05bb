#include "wsync/worker_agent/worker_error.hpp"

namespace wsync::worker_agent {

std::string_view toString(WorkerError error) {
  switch (error) {
    case WorkerError::InvalidOptions:
      return "invalid worker options";
    case WorkerError::InvalidBinding:
      return "invalid binding";
    case WorkerError::ManifestMismatch:
      return "manifest does not match the bindings";
    case WorkerError::Registration:
      return "registration failed";
  }
  return "unknown worker error";
}

}  // namespace wsync::worker_agent
