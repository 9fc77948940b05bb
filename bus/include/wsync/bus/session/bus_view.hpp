#pragma once
// What the coordinator states for every agent of a bus (the committed version, whether generation is paused), as an
// agent's engine reads it on its hot path. On the coordinator's host that is the control block (openHostView); on
// another host a mirror fed by the coordinator's beats (bus_mirror.hpp). Either way a read is one atomic load.
// Threading: any thread.
#include <cstdint>
#include <memory>
#include <string_view>

#include <tl/expected.hpp>

#include "wsync/bus/state/control_block.hpp"

namespace wsync::bus {

class BusView {
 public:
  virtual ~BusView() = default;
  virtual std::uint64_t committedVersion() const = 0;
  virtual PauseState pauseState() const = 0;
};

// `busName`'s control block on this host, read-only.
tl::expected<std::shared_ptr<const BusView>, ControlBlockFailure> openHostView(std::string_view busName);

}  // namespace wsync::bus
