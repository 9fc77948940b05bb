#include "agent_registry.hpp"

#include <algorithm>

namespace wsync::coordinator {

bus::ChannelMember channelMember(const AgentRecord& agent) {
  return bus::ChannelMember{agent.agentId, agent.routingId, agent.sameHost, agent.hostname, agent.contacts};
}

const AgentRecord* AgentRegistry::find(std::string_view routingId) const {
  const auto found = agents_.find(routingId);
  return found == agents_.end() ? nullptr : &found->second;
}

AgentRecord* AgentRegistry::find(std::string_view routingId) {
  const auto found = agents_.find(routingId);
  return found == agents_.end() ? nullptr : &found->second;
}

AgentRecord* AgentRegistry::findById(std::string_view agentId) {
  for (auto& [routingId, agent] : agents_) {
    if (agent.agentId == agentId) return &agent;
  }
  return nullptr;
}

std::uint32_t AgentRegistry::workerCount() const {
  return static_cast<std::uint32_t>(std::count_if(
      agents_.begin(), agents_.end(), [](const auto& entry) { return entry.second.role == msg::Role::Worker; }));
}

std::vector<const AgentRecord*> AgentRegistry::workersByRank() const {
  std::vector<const AgentRecord*> workers;
  for (const auto& [routingId, agent] : agents_) {
    if (agent.role == msg::Role::Worker) workers.push_back(&agent);
  }
  std::sort(workers.begin(), workers.end(),
            [](const AgentRecord* a, const AgentRecord* b) { return a->rank < b->rank; });
  return workers;
}

std::uint32_t AgentRegistry::workersOffering(msg::ChannelKind kind) const {
  return static_cast<std::uint32_t>(std::count_if(agents_.begin(), agents_.end(), [&](const auto& entry) {
    const AgentRecord& agent = entry.second;
    return agent.role == msg::Role::Worker &&
           std::find(agent.channels.begin(), agent.channels.end(), kind) != agent.channels.end();
  }));
}

std::optional<std::int32_t> AgentRegistry::freeRank(msg::Role role, std::int32_t requested, std::string& why) const {
  auto holderOf = [&](std::int32_t rank) -> const AgentRecord* {
    for (const auto& [routingId, agent] : agents_) {
      if (agent.role == role && agent.rank == rank) return &agent;
    }
    return nullptr;
  };
  if (requested >= 0) {
    if (const AgentRecord* holder = holderOf(requested)) {
      why = "rank " + std::to_string(requested) + " of the " + msg::EnumNameRole(role) + "s is held by '" +
            holder->agentId + "'";
      return std::nullopt;
    }
    return requested;
  }
  for (std::int32_t rank = 0;; ++rank) {
    if (holderOf(rank) == nullptr) return rank;
  }
}

const AgentRecord& AgentRegistry::add(AgentRecord record) {
  std::string key = record.routingId;
  return agents_.insert_or_assign(std::move(key), std::move(record)).first->second;
}

std::optional<AgentRecord> AgentRegistry::remove(std::string_view routingId) {
  const auto found = agents_.find(routingId);
  if (found == agents_.end()) return std::nullopt;
  AgentRecord record = std::move(found->second);
  agents_.erase(found);
  return record;
}

}  // namespace wsync::coordinator
