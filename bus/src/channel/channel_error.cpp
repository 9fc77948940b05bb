#include "wsync/bus/channel/channel_error.hpp"

namespace wsync::bus {

std::string_view toString(ChannelError error) {
  switch (error) {
    case ChannelError::InvalidGeometry:
      return "invalid geometry";
    case ChannelError::NoArena:
      return "no such segment";
    case ChannelError::LayoutMismatch:
      return "segment of an incompatible layout";
    case ChannelError::Unsafe:
      return "segment not private to this user";
    case ChannelError::PlanMismatch:
      return "plan does not fit";
    case ChannelError::Timeout:
      return "transfer timed out";
    case ChannelError::Aborted:
      return "transfer aborted";
    case ChannelError::Overwritten:
      return "bucket overwritten while copied";
    case ChannelError::SystemError:
      return "system error";
    case ChannelError::Unsupported:
      return "unsupported channel";
    case ChannelError::DeviceError:
      return "CUDA error";
    case ChannelError::CommunicatorError:
      return "NCCL communicator error";
    case ChannelError::DigestMismatch:
      return "receivers' digests differ";
    case ChannelError::PeerGone:
      return "a peer is gone";
    case ChannelError::Refused:
      return "refused by the peer";
  }
  return "unknown channel error";
}

FailureCause causeOf(ChannelError error) {
  switch (error) {
    case ChannelError::Aborted:
      return FailureCause::Cancelled;
    case ChannelError::Timeout:
    case ChannelError::PeerGone:
      return FailureCause::PeerStalled;
    default:
      return FailureCause::Local;
  }
}

}  // namespace wsync::bus
