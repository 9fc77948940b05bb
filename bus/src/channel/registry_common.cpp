// The parts of registry.hpp that are the same in every build.
#include "wsync/bus/channel/registry.hpp"

namespace wsync::bus {

TensorMemory channelMemory(msg::ChannelKind kind) {
  return kind == msg::ChannelKind::Shm ? TensorMemory::Host : TensorMemory::Device;
}

std::string channelName(msg::ChannelKind kind) {
  switch (kind) {
    case msg::ChannelKind::Shm: return "shm";
    case msg::ChannelKind::Nccl: return "nccl";
    case msg::ChannelKind::CudaIpc: return "cuda_ipc";
  }
  return msg::EnumNameChannelKind(kind);
}

std::optional<msg::ChannelKind> parseChannelName(std::string_view name) {
  for (const msg::ChannelKind kind : msg::EnumValuesChannelKind()) {
    if (channelName(kind) == name) return kind;
  }
  return std::nullopt;
}

}  // namespace wsync::bus
