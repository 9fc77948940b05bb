// The bus as the control block of the coordinator's host states it (bus_view.hpp).
#include "wsync/bus/session/bus_view.hpp"

namespace wsync::bus {

namespace {

class HostView final : public BusView {
 public:
  explicit HostView(ControlBlockView&& block) : block_(std::move(block)) {}
  std::uint64_t committedVersion() const override { return block_.committedVersion(); }
  PauseState pauseState() const override { return block_.pauseState(); }

 private:
  ControlBlockView block_;
};

}  // namespace

tl::expected<std::shared_ptr<const BusView>, ControlBlockFailure> openHostView(std::string_view busName) {
  auto block = ControlBlockView::open(busName);
  if (!block) return tl::unexpected(block.error());
  return std::make_shared<const HostView>(std::move(*block));
}

}  // namespace wsync::bus
