#pragma once
// What an agent's channels must have open before its hello: the tcp channel's listening socket, whose address the
// hello advertises (the sender listens and its receivers connect, docs/tcp-channel.md). An agent that sends makes
// one at start (registry.hpp: openChannelListeners), puts contacts() into its AgentHello (SessionOptions) and hands
// it to its PayloadEndpoint, which passes it to the channels it opens (ChannelSetup). Opaque to the roles: they
// neither know nor name what is inside.
//
// Threading: contacts() from any thread; what is inside belongs to the channel that uses it (the agent's I/O thread).
#include <vector>

#include "wsync/bus/channel/channel_contact.hpp"

namespace wsync::bus {

class ChannelListeners {
 public:
  virtual ~ChannelListeners() = default;
  // One per channel that listens: what the agent's hello advertises.
  virtual const std::vector<ChannelContact>& contacts() const = 0;
};

}  // namespace wsync::bus
