#include "binding_ledger.hpp"

#include <algorithm>

namespace wsync::worker_agent::detail {

void BindingClaim::release() noexcept {
  if (ledger_ == nullptr) return;
  ledger_->release(id_);
  ledger_ = nullptr;
}

BindingLedger& BindingLedger::process() {
  static BindingLedger ledger;
  return ledger;
}

tl::expected<std::unique_ptr<BindingClaim>, WorkerFailure> BindingLedger::claim(
    const std::string& agentId, std::shared_ptr<const WorkerBindings> bindings) {
  std::lock_guard lock(mutex_);
  for (const Holder& holder : holders_) {
    for (const TensorBinding& binding : bindings->tensors()) {
      const auto other = holder.bindings->overlapping(binding.destination);
      if (!other) continue;
      const TensorBinding& taken = holder.bindings->tensors()[*other];
      return bus::fail(WorkerError::InvalidBinding,
                       "tensor '" + binding.spec.name + "': memory " + formatRange(binding.destination) +
                           " overlaps that of tensor '" + taken.spec.name + "' " + formatRange(taken.destination) +
                           ", bound by worker '" + holder.agentId +
                           "' of this process: two workers would write the same bytes, and one engine serve the "
                           "other's weights");
    }
  }
  const std::uint64_t id = ++claims_;
  holders_.push_back(Holder{id, agentId, std::move(bindings)});
  return std::unique_ptr<BindingClaim>(new BindingClaim(*this, id));
}

void BindingLedger::release(std::uint64_t id) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(holders_, [id](const Holder& holder) { return holder.id == id; });
}

}  // namespace wsync::worker_agent::detail
