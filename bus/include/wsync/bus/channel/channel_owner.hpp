#pragma once
// The coordinator's side of a payload channel: whatever a transport needs to exist before a round can move bytes
// on it (the shm arena, the cuda_ipc segment, an NCCL unique id or a tcp admission token for the round's members),
// made and ended here. The coordinator holds one owner per channel this build has (registry.hpp:
// createChannelOwners) and never names a transport: it asks the owner of the round's channel to prepare, and to
// abort when the round fails.
//
// Threading: the coordinator's one thread.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <wsync/schemas/control_generated.h>
#include <tl/expected.hpp>

#include "wsync/bus/channel/channel.hpp"
#include "wsync/bus/channel/channel_contact.hpp"

namespace wsync::bus {

// One agent of a round, as an owner sees it.
struct ChannelMember {
  std::string agentId;
  std::string memberKey;                 // stable for the registration (the routing id of its connection)
  bool sameHost = false;                 // on the coordinator's host: it can open the coordinator's shared memory
  std::string host;                      // its hostname, for refusals that name where it is
  std::vector<ChannelContact> contacts;  // where it listens, from its hello (a sender's tcp address)
};

// What the agents of one round need to open the channel, carried in their TransferPlan.
struct ChannelGrant {
  std::string segment;  // a shared-memory segment they open (shm arena, cuda_ipc segment), or empty
  // The round's group id (TransferPlan nccl_unique_id): a communicator's id (NCCL unique id), the token a receiver
  // presents to the sender (tcp), or empty.
  std::vector<std::uint8_t> groupId;
  std::string senderContact;  // where the receivers reach the sender (tcp: its contact), or empty
  // Members have ranks in a group: the sender 0, receiver i rank i + 1 (TransferPlan nccl_rank/nccl_world_size).
  bool ranked = false;
  std::vector<std::string> sourceContacts;  // a region round's: where the receivers reach each source, or empty
};

class ChannelOwner {
 public:
  virtual ~ChannelOwner() = default;
  virtual msg::ChannelKind kind() const = 0;
  // The memory a round's tensors are in on this channel; the coordinator cuts device rounds into its GPU buckets.
  virtual TensorMemory tensorMemory() const = 0;
  // Receivers one round can take (every registered worker takes part in every round, so also how many workers
  // offering this channel can register).
  virtual std::uint32_t maxReceivers() const = 0;
  // Whether its members may be on other hosts than the coordinator's (nccl, tcp); a channel through the coordinator's
  // shared memory (shm, cuda_ipc) cannot, and a round with members elsewhere is refused before anyone pauses.
  virtual bool crossesHosts() const = 0;
  // The resources of a round about to begin between `sender` and `receivers` (in receiver order), or why it cannot
  // run on this channel, naming the agent at fault.
  virtual tl::expected<ChannelGrant, std::string> prepare(const ChannelMember& sender,
                                                          std::span<const ChannelMember> receivers) = 0;
  // The same for a region round (docs/regions.md): its sources in source order, however many. A channel without
  // region transfers refuses (the default), so that the round is refused before any engine pauses.
  virtual tl::expected<ChannelGrant, std::string> prepareSources(std::span<const ChannelMember> senders,
                                                                 std::span<const ChannelMember> receivers);
  // `round` ended without a commit: every sender and receiver still waiting on it gives up within one wait slice.
  // `transferBegun`: the agents may have opened and used the channel, so what they hold may be inconsistent (an
  // NCCL communicator aborted on some ranks only) and the next round gets new resources.
  virtual void abort(std::uint64_t round, bool transferBegun) = 0;
};

}  // namespace wsync::bus
