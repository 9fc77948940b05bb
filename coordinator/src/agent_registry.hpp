#pragma once
// The registered agents, by the routing id of their connection, and the ranks they hold: the coordinator's
// registry, apart from its round machine. The control block's slots are written by the coordinator beside it.
// Threading: the coordinator's one thread.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <wsync/schemas/control_generated.h>

#include "wsync/bus/channel/channel_contact.hpp"
#include "wsync/bus/channel/channel_owner.hpp"
#include "wsync/bus/core/process_identity.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/region.hpp"
#include "wsync/bus/protocol/registration_secret.hpp"

namespace wsync::coordinator {

// One registered agent, keyed by the routing id of its connection.
struct AgentRecord {
  std::string routingId;
  std::string agentId;
  msg::Role role = msg::Role::Unknown;
  std::int32_t rank = -1;
  std::uint32_t slot = 0;
  bus::ProcessIdentity process;     // startTicks known only for a process on this host
  bool sameHost = false;            // shares the coordinator's shared memory and pids (core/host_identity.hpp)
  std::string hostname;             // as it reported it: for messages naming where an agent is
  std::uint64_t lastMessageMs = 0;  // CLOCK_MONOTONIC, like the shared-memory heartbeat word
  std::uint64_t appliedVersion = 0;
  std::vector<bus::Digest> knownManifests;  // sent to this worker already
  // A worker that binds slices (AgentHello bindings, docs/regions.md), or null: it binds every tensor whole.
  std::shared_ptr<const bus::ReceiverBindings> bindings;
  bus::Digest bindingsDigest;
  // Holdings and bindings sent to this agent already (region rounds): later rounds name them by digest.
  std::vector<bus::Digest> knownDeclarations;
  std::vector<msg::ChannelKind> channels;     // payload channels it can use (AgentHello)
  std::vector<bus::ChannelContact> contacts;  // where it listens for them (AgentHello channel_contacts)
  // Proof of the registration (registration_secret.hpp): handed out in its Welcome, asked of a hello that would
  // replace it and of every SlotReport.
  bus::RegistrationSecret secret;
  // The CURVE key its connection was admitted with (empty without CURVE): every message for it must come with it.
  std::string peerKey;
};

// The agent as a payload channel's owner sees it.
bus::ChannelMember channelMember(const AgentRecord& agent);

class AgentRegistry {
 public:
  using Agents = std::map<std::string, AgentRecord, std::less<>>;

  const AgentRecord* find(std::string_view routingId) const;
  AgentRecord* find(std::string_view routingId);
  bool contains(std::string_view routingId) const { return find(routingId) != nullptr; }
  AgentRecord* findById(std::string_view agentId);
  // Every agent, by routing id.
  const Agents& all() const { return agents_; }
  std::uint32_t size() const { return static_cast<std::uint32_t>(agents_.size()); }
  std::uint32_t workerCount() const;
  // The workers in rank order: a round's receivers.
  std::vector<const AgentRecord*> workersByRank() const;
  // Workers that offered channel `kind` in their hello.
  std::uint32_t workersOffering(msg::ChannelKind kind) const;
  // The rank an agent of `role` gets: `requested` if no one of that role holds it (else nothing, and `why` names
  // the holder), or the lowest free one when `requested` is negative.
  std::optional<std::int32_t> freeRank(msg::Role role, std::int32_t requested, std::string& why) const;

  const AgentRecord& add(AgentRecord record);
  // The record of `routingId`, taken out of the registry; nothing if it was not registered.
  std::optional<AgentRecord> remove(std::string_view routingId);

 private:
  Agents agents_;
};

}  // namespace wsync::coordinator
