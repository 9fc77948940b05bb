#pragma once
// The memory the live worker agents of this process have bound, so that no two of them bind the same bytes: each
// would write its versions there, and the engine behind one would serve the other's weights while both report
// their versions applied byte for byte. A worker claims its bindings when it starts, before it registers, and
// releases them when it stops (its I/O thread has ended: nothing of it writes them again). WorkerBindings::bind
// keeps one worker's own bindings apart; this keeps the workers apart.
//
// Threading: any thread; one mutex orders claims and releases. A claim reads the other workers' bindings under it,
// which is safe because bindings never change once a worker has started.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/worker_agent/worker_bindings.hpp"
#include "wsync/worker_agent/worker_error.hpp"

namespace wsync::worker_agent::detail {

class BindingLedger;

// A worker's hold on the memory it bound, released when it is destroyed (or release() is called).
class BindingClaim {
 public:
  BindingClaim(const BindingClaim&) = delete;
  BindingClaim& operator=(const BindingClaim&) = delete;
  ~BindingClaim() { release(); }

  void release() noexcept;

 private:
  friend class BindingLedger;
  BindingClaim(BindingLedger& ledger, std::uint64_t id) : ledger_(&ledger), id_(id) {}

  BindingLedger* ledger_;  // null once released
  std::uint64_t id_;
};

class BindingLedger {
 public:
  // The ledger of this process (of this copy of the library: a process that links the worker agent twice, say a
  // program and a libwsync.so beside it, has one ledger in each).
  static BindingLedger& process();

  // Claims every non-empty span of `bindings` for worker `agentId`. Refused (InvalidBinding) when one shares a
  // byte with a span a live claim holds, naming this worker's tensor, the other worker and its tensor. Costs
  // O(n log m) per live claim: n this worker's tensors, m the other's.
  tl::expected<std::unique_ptr<BindingClaim>, WorkerFailure> claim(const std::string& agentId,
                                                                   std::shared_ptr<const WorkerBindings> bindings);

 private:
  friend class BindingClaim;
  void release(std::uint64_t id) noexcept;

  struct Holder {
    std::uint64_t id;
    std::string agentId;
    std::shared_ptr<const WorkerBindings> bindings;
  };

  std::mutex mutex_;
  std::vector<Holder> holders_;  // guarded by mutex_: one per live claim
  std::uint64_t claims_ = 0;     // guarded by mutex_: the last claim's id
};

}  // namespace wsync::worker_agent::detail
