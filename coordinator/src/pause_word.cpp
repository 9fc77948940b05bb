#include "pause_word.hpp"

namespace wsync::coordinator {

void PauseWord::setOperatorPause(std::optional<msg::PauseMode> mode) {
  operator_ = mode;
  block_.setOperatorPause(operator_);
  write();
}

void PauseWord::carryOver(std::optional<msg::PauseMode> mode) {
  operator_ = mode;  // the replaced block recorded it already
  write();
}

void PauseWord::roundPaused(std::uint64_t round, msg::PauseMode mode) {
  roundHolds_ = true;
  round_ = round;
  roundMode_ = mode;
  write();
}

void PauseWord::roundEnded() {
  roundHolds_ = false;
  write();
}

void PauseWord::write() {
  if (operator_) {
    block_.setPauseState(bus::PauseState{true, *operator_, roundHolds_ ? round_ : 0});
  } else {
    block_.setPauseState(bus::PauseState{roundHolds_, roundMode_, round_});
  }
}

}  // namespace wsync::coordinator
