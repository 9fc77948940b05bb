#pragma once
// Who holds generation paused, and the control block's pause word that says so to engines polling it: its one
// writer. A round holds the workers from its Pause to its Resume; an operator from wsync-ctl pause to wsync-ctl
// resume, across rounds and coordinator restarts (the hold is kept in the control block too). Generation is paused
// while either holds it. Threading: the coordinator's one thread.
#include <cstdint>
#include <optional>

#include "wsync/bus/state/control_block.hpp"

namespace wsync::coordinator {

class PauseWord {
 public:
  explicit PauseWord(bus::ControlBlockOwner& block) : block_(block) {}

  // The operator's hold, if any, and the mode it asked for.
  const std::optional<msg::PauseMode>& operatorPause() const { return operator_; }
  // wsync-ctl pause (a mode) or resume (nothing).
  void setOperatorPause(std::optional<msg::PauseMode> mode);
  // A coordinator that replaced a dead one's control block: the operator's pause it recorded still holds.
  void carryOver(std::optional<msg::PauseMode> mode);

  // Round `round` pauses the workers in `mode`, until roundEnded().
  void roundPaused(std::uint64_t round, msg::PauseMode mode);
  void roundEnded();

 private:
  // The word: paused while anyone holds; the operator's mode and round 0 while the operator does, else the round's.
  void write();

  bus::ControlBlockOwner& block_;
  std::optional<msg::PauseMode> operator_;
  bool roundHolds_ = false;
  std::uint64_t round_ = 0;  // the last round that paused
  msg::PauseMode roundMode_ = msg::PauseMode::Keep;
};

}  // namespace wsync::coordinator
