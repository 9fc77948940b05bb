#pragma once
// Where an agent can be reached for one payload channel: a sender that listens (the tcp channel's HOST:PORT)
// advertises it in its AgentHello, and the coordinator hands it to the round's receivers in their TransferPlan. The
// roles carry contacts without reading them; only the channel that made one parses it.
#include <string>

#include <wsync/schemas/control_generated.h>

namespace wsync::bus {

struct ChannelContact {
  msg::ChannelKind kind = msg::ChannelKind::Shm;
  std::string address;

  friend bool operator==(const ChannelContact&, const ChannelContact&) = default;
};

}  // namespace wsync::bus
