// Checks and conversions of what callers pass in: versioned structs, texts, connections, tensors, timeouts, enums.
#include "boundary.hpp"

#include <algorithm>
#include <cstdlib>

#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/protocol/client_text.hpp"
#include "wsync/bus/protocol/dtype.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/worker_agent/worker_bindings.hpp"

namespace wsync::capi {

tl::expected<std::size_t, std::string> coveredBytes(std::uint32_t structSize, std::span<const Field> fields,
                                                    std::string_view what) {
  if (structSize < sizeof(std::uint32_t)) {
    return tl::unexpected(std::string(what) + "->struct_size is " + std::to_string(structSize) +
                          ": fill the struct with its _init function first");
  }
  for (const Field& field : fields) {
    if (field.offset < structSize && field.offset + field.size > structSize) {
      return tl::unexpected(std::string(what) + "->struct_size " + std::to_string(structSize) +
                            " ends inside a field (bytes " + std::to_string(field.offset) + " to " +
                            std::to_string(field.offset + field.size) +
                            "): it must be the sizeof of the struct of a "
                            "wsync.h, as the _init function sets it");
    }
  }
  return structSize;
}

void copyCoveredFields(void* to, const void* from, std::size_t covered, std::span<const Field> fields) {
  for (const Field& field : fields) {
    if (field.offset + field.size > covered) continue;
    std::memcpy(static_cast<char*>(to) + field.offset, static_cast<const char*>(from) + field.offset, field.size);
  }
}

tl::expected<std::optional<std::string>, std::string> optionalText(const char* text, std::string_view what,
                                                                   std::size_t maxBytes) {
  if (text == nullptr) return std::nullopt;
  const std::size_t length = strnlen(text, maxBytes + 1);
  if (length > maxBytes) {
    return tl::unexpected(std::string(what) + " is longer than " + std::to_string(maxBytes) + " bytes");
  }
  return std::string(text, length);
}

tl::expected<std::string, std::string> requiredText(const char* text, std::string_view what, std::size_t maxBytes) {
  auto maybeText = optionalText(text, what, maxBytes);
  if (!maybeText) return tl::unexpected(std::move(maybeText.error()));
  if (!*maybeText || (*maybeText)->empty()) return tl::unexpected(std::string(what) + " is required");
  return std::move(**maybeText);
}

tl::expected<Connection, std::string> connectionOf(const wsync_connection& given) {
  Connection connection;
  auto busName = requiredText(given.bus, "bus", kMaxConfigTextBytes);
  if (!busName) return tl::unexpected(std::move(busName.error()));
  connection.bus = std::move(*busName);
  auto transport = optionalText(given.transport, "transport", kMaxConfigTextBytes);
  auto keys = optionalText(given.curve_keys, "curve_keys", kMaxConfigTextBytes);
  auto serverKey = optionalText(given.server_key, "server_key", kMaxConfigTextBytes);
  for (auto* text : {&transport, &keys, &serverKey}) {
    if (!*text) return tl::unexpected(std::move(text->error()));
  }
  if (*transport) connection.transport = std::move(**transport);
  auto endpoints = bus::resolveEndpoints(connection.bus, connection.transport);
  if (!endpoints) {
    return tl::unexpected("bus '" + bus::printableText(connection.bus) + "': " + endpoints.error().describe());
  }
  connection.endpoints = std::move(*endpoints);
  if (!*keys && !*serverKey) return connection;
  if (!*keys || !*serverKey) return tl::unexpected(std::string("CURVE needs both curve_keys and server_key"));
  auto keyPair = bus::readCurveKeyPair(**keys);
  if (!keyPair) return tl::unexpected("curve_keys: " + keyPair.error());
  auto server = bus::resolveCurvePublicKey(**serverKey);
  if (!server) return tl::unexpected("server_key: " + server.error());
  connection.curve = bus::CurveClient{std::move(*keyPair), std::move(*server)};
  return connection;
}

tl::expected<AgentIdentity, std::string> agentIdentityOf(const wsync_connection& connection, const char* agentId,
                                                         std::int32_t rank) {
  auto where = connectionOf(connection);
  if (!where) return tl::unexpected(std::move(where.error()));
  auto id = requiredText(agentId, "agent_id", bus::kMaxAgentIdBytes);
  if (!id) return tl::unexpected(std::move(id.error()));
  if (std::string why = bus::checkAgentId(*id); !why.empty()) return tl::unexpected("agent_id: " + why);
  if (rank < -1) return tl::unexpected("rank is " + std::to_string(rank) + ": -1 or a rank");
  return AgentIdentity{std::move(*where), std::move(*id), rank};
}

tl::expected<std::span<const wsync_tensor>, std::string> tensorArrayOf(const wsync_tensor* tensors, std::size_t count) {
  if (tensors == nullptr && count > 0) return tl::unexpected("tensors is NULL but count is " + std::to_string(count));
  if (count > bus::kMaxTensors) {
    return tl::unexpected("count " + std::to_string(count) + " is above the " + std::to_string(bus::kMaxTensors) +
                          " tensors a manifest may hold");
  }
  return std::span<const wsync_tensor>(tensors, count);
}

tl::expected<bus::TensorSpec, std::string> tensorSpecOf(const wsync_tensor& tensor, std::size_t index) {
  const std::string which = "tensor " + std::to_string(index);
  if (tensor.name == nullptr) return tl::unexpected(which + ": name is NULL");
  const std::size_t nameBytes = strnlen(tensor.name, bus::kMaxTensorNameBytes + 1);
  if (nameBytes > bus::kMaxTensorNameBytes) {
    return tl::unexpected(which + ": name is longer than " + std::to_string(bus::kMaxTensorNameBytes) + " bytes");
  }
  bus::TensorSpec spec{std::string(tensor.name, nameBytes), static_cast<msg::DType>(tensor.dtype), {}};
  if (auto valid = bus::validateTensorName(spec.name); !valid) {
    return tl::unexpected(which + ": " + valid.error().detail);
  }
  const std::string named = which + " ('" + spec.name + "')";
  if (tensor.dtype == 0 || bus::elementBytes(spec.dtype) == 0) {
    return tl::unexpected(named + ": dtype " + std::to_string(tensor.dtype) + " is not a wsync dtype (" +
                          std::to_string(WSYNC_DTYPE_BOOL) + " to " + std::to_string(WSYNC_DTYPE_U64) + ")");
  }
  if (tensor.ndim > bus::kMaxTensorRank) {
    return tl::unexpected(named + ": ndim " + std::to_string(tensor.ndim) + " is above " +
                          std::to_string(bus::kMaxTensorRank));
  }
  if (tensor.ndim > 0 && tensor.shape == nullptr) {
    return tl::unexpected(named + ": shape is NULL but ndim is " + std::to_string(tensor.ndim));
  }
  spec.shape.assign(tensor.shape, tensor.shape + tensor.ndim);
  std::uint64_t bytes = bus::elementBytes(spec.dtype);
  const std::string shape = named + ": shape " + worker_agent::formatShape(spec.shape);
  for (const std::int64_t dimension : spec.shape) {
    if (dimension < 0) return tl::unexpected(shape + " is negative");
    const bool overflows = __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(dimension), &bytes);
    if (overflows || bytes > bus::kMaxManifestBytes) {
      return tl::unexpected(shape + " is larger than " + std::to_string(bus::kMaxManifestBytes) + " bytes");
    }
  }
  return spec;
}

tl::expected<std::span<std::byte>, std::string> tensorMemoryOf(const wsync_tensor& tensor, const bus::TensorSpec& spec,
                                                               std::size_t index) {
  std::uint64_t expected = bus::elementBytes(spec.dtype);
  for (const std::int64_t dimension : spec.shape) expected *= static_cast<std::uint64_t>(dimension);  // checked
  const std::string named = "tensor " + std::to_string(index) + " ('" + spec.name + "')";
  if (tensor.bytes != expected) {
    return tl::unexpected(named + ": bytes " + std::to_string(tensor.bytes) + " but dtype " +
                          msg::EnumNameDType(spec.dtype) + " x shape " + worker_agent::formatShape(spec.shape) +
                          " is " + std::to_string(expected));
  }
  if (tensor.data == nullptr && tensor.bytes > 0) return tl::unexpected(named + ": data is NULL");
  return std::span<std::byte>(static_cast<std::byte*>(tensor.data), static_cast<std::size_t>(tensor.bytes));
}

tl::expected<std::chrono::milliseconds, std::string> timeoutOf(std::int64_t milliseconds, std::string_view what) {
  if (milliseconds < 0) {
    return tl::unexpected(std::string(what) + " is " + std::to_string(milliseconds) + ": give 0 or more milliseconds");
  }
  return std::min(std::chrono::milliseconds(milliseconds), kLongestWait);
}

std::optional<msg::PauseMode> pauseModeOf(wsync_pause_mode mode) {
  static_assert(WSYNC_PAUSE_ABORT == static_cast<int>(msg::PauseMode::Abort) &&
                WSYNC_PAUSE_WAIT == static_cast<int>(msg::PauseMode::Wait) &&
                WSYNC_PAUSE_KEEP == static_cast<int>(msg::PauseMode::Keep) &&
                msg::PauseMode::MAX == msg::PauseMode::Keep);
  if (mode > WSYNC_PAUSE_KEEP) return std::nullopt;
  return static_cast<msg::PauseMode>(mode);
}

std::optional<msg::ChannelKind> channelOf(wsync_channel channel) {
  static_assert(WSYNC_CHANNEL_SHM == static_cast<int>(msg::ChannelKind::Shm) &&
                WSYNC_CHANNEL_NCCL == static_cast<int>(msg::ChannelKind::Nccl) &&
                WSYNC_CHANNEL_CUDA_IPC == static_cast<int>(msg::ChannelKind::CudaIpc) &&
                WSYNC_CHANNEL_TCP == static_cast<int>(msg::ChannelKind::Tcp) &&
                msg::ChannelKind::MAX == msg::ChannelKind::Tcp);
  if (channel > WSYNC_CHANNEL_TCP) return std::nullopt;
  return static_cast<msg::ChannelKind>(channel);
}

bool builtWith(msg::ChannelKind channel) {
  const auto channels = bus::buildChannels();
  return std::find(channels.begin(), channels.end(), channel) != channels.end();
}

char* newCString(const std::string& text) {
  auto* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) throw std::bad_alloc();
  std::memcpy(copy, text.c_str(), text.size() + 1);
  return copy;
}

}  // namespace wsync::capi
