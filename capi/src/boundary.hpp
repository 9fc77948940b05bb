#pragma once
// What every entry point of the C API shares (docs/c-api.md): the calling thread's last error, the guard that keeps
// every exception on this side of the boundary, versioned structs read and written as far as their struct_size
// reaches, and the checks and conversions of what callers pass in (tensors, connections, enums, timeouts).
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>

#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/transport/bus_address.hpp"
#include "wsync/bus/transport/curve.hpp"
#include "wsync/wsync.h"

namespace wsync::capi {

// ---- the last error ----------------------------------------------------------------------------------------------

// Records `text` as the calling thread's last error and returns `status`.
wsync_status fail(wsync_status status, std::string text);
// Never throws: for the guard's catch blocks, where even the text's allocation may fail.
wsync_status failInternal(const char* function, const char* what) noexcept;
void clearLastError() noexcept;

// Runs `body`, which returns a wsync_status, with every exception caught: an exception means a bug or a system
// failure (out of memory), WSYNC_INTERNAL with its text. The last error is left as it was unless `body` fails: for a
// destroy that can be refused, so that a caller cleaning up after a failure still reads its text.
template <typename Body>
wsync_status guardedCleanup(const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return failInternal(function, "out of memory");
  } catch (const std::exception& error) {
    return failInternal(function, error.what());
  } catch (...) {
    return failInternal(function, "an exception that is not a std::exception");
  }
}

// guardedCleanup() with the last error cleared first: every entry point but the destroys.
template <typename Body>
wsync_status guarded(const char* function, Body&& body) noexcept {
  return guardedCleanup(function, [&]() -> wsync_status {
    clearLastError();
    return body();
  });
}

// Deletes a handle (NULL is fine) without touching the last error, so that a caller cleaning up after a failure
// still reads its text. For handles whose destructor cannot throw: destructors are noexcept, so one that did would
// end the process before this catch saw it. A handle whose teardown can fail (a worker's stop, refused or thrown)
// does that work first, in guardedCleanup(), and deletes only after it succeeded (wsync_worker_destroy).
template <typename Handle>
void destroyHandle(const char* function, Handle* handle) noexcept {
  try {
    delete handle;
  } catch (...) {
    failInternal(function, "an exception while destroying a handle");
  }
}

// ---- versioned structs -------------------------------------------------------------------------------------------

// One field of a struct of the header: where it is and how long. A caller built against an older header passes a
// smaller struct_size; the fields it lacks keep their defaults (inputs) or are not written (outputs).
struct Field {
  std::size_t offset;
  std::size_t size;
};
#define WSYNC_CAPI_FIELD(Struct, member) \
  ::wsync::capi::Field { offsetof(Struct, member), sizeof(Struct::member) }

// The part of a struct a caller's struct_size covers: at least the struct_size field, and never a field in part.
tl::expected<std::size_t, std::string> coveredBytes(std::uint32_t structSize, std::span<const Field> fields,
                                                    std::string_view what);
// Copies `fields` from `from` to `to` as far as `covered` bytes reach (whole fields only).
void copyCoveredFields(void* to, const void* from, std::size_t covered, std::span<const Field> fields);

// `given`'s fields that its struct_size covers, over `defaults` (which fills the rest and says the struct's size).
template <typename Struct, std::size_t N>
tl::expected<Struct, std::string> readVersioned(const Struct* given, Struct defaults,
                                                const std::array<Field, N>& fields, std::string_view what) {
  std::uint32_t structSize = 0;
  std::memcpy(&structSize, given, sizeof(structSize));
  auto covered = coveredBytes(structSize, fields, what);
  if (!covered) return tl::unexpected(std::move(covered.error()));
  copyCoveredFields(&defaults, given, *covered, fields);
  return defaults;
}

// Writes `value`'s fields that `out`'s struct_size covers (leaving its struct_size as the caller set it).
template <typename Struct, std::size_t N>
tl::expected<void, std::string> writeVersioned(Struct* out, const Struct& value, const std::array<Field, N>& fields,
                                               std::string_view what) {
  std::uint32_t structSize = 0;
  std::memcpy(&structSize, out, sizeof(structSize));
  auto covered = coveredBytes(structSize, fields, what);
  if (!covered) return tl::unexpected(std::move(covered.error()));
  copyCoveredFields(out, &value, *covered, fields);
  return {};
}

// The first steps of a start function: `out` cleared (NULL refused), then `config` read as far as it reaches.
template <typename Handle, typename Struct, std::size_t N>
tl::expected<Struct, std::string> startConfig(Handle** out, const Struct* config, Struct defaults,
                                              const std::array<Field, N>& fields) {
  if (out == nullptr) return tl::unexpected(std::string("out is NULL"));
  *out = nullptr;
  if (config == nullptr) return tl::unexpected(std::string("config is NULL"));
  return readVersioned(config, std::move(defaults), fields, "config");
}

// ---- what callers pass in ----------------------------------------------------------------------------------------

// A C string of at most `maxBytes` (NULL: nothing); read no further than that, so a missing NUL cannot run away.
tl::expected<std::optional<std::string>, std::string> optionalText(const char* text, std::string_view what,
                                                                   std::size_t maxBytes);
// The same, required.
tl::expected<std::string, std::string> requiredText(const char* text, std::string_view what, std::size_t maxBytes);

// Paths and keys in configs: far above any real one, low enough that a missing NUL is found quickly.
inline constexpr std::size_t kMaxConfigTextBytes = 4096;

// A bus's name, transport and CURVE settings, checked: the name and transport as resolveEndpoints takes them.
struct Connection {
  std::string bus;
  std::string transport = "ipc";
  std::optional<bus::CurveClient> curve;
  bus::BusEndpoints endpoints;
};
tl::expected<Connection, std::string> connectionOf(const wsync_connection& connection);

// What both agents' configs carry, checked: the bus, the agent's id (bus::checkAgentId) and the rank it asks for.
struct AgentIdentity {
  Connection connection;
  std::string agentId;
  std::int32_t rank = -1;

  // Into TrainerOptions or WorkerOptions, which name these fields alike.
  template <typename AgentOptions>
  void moveInto(AgentOptions& options) && {
    options.bus = std::move(connection.bus);
    options.transport = std::move(connection.transport);
    options.curve = std::move(connection.curve);
    options.agentId = std::move(agentId);
    options.requestedRank = rank;
  }
};
tl::expected<AgentIdentity, std::string> agentIdentityOf(const wsync_connection& connection, const char* agentId,
                                                         std::int32_t rank);

// Tensor `index` of a caller's array as a manifest entry: its name (validateTensorName), a dtype of the schema and
// a shape of at most kMaxTensorRank non-negative dimensions whose byte count fits in 64 bits. The text names the
// tensor by index and name: "tensor 3 ('lm_head.weight'): dtype 99 is not a wsync dtype".
tl::expected<bus::TensorSpec, std::string> tensorSpecOf(const wsync_tensor& tensor, std::size_t index);
// The tensor's memory, `bytes` long: which must be the dtype's size x elements of its spec, and data non-NULL
// unless it is empty. "tensor 3 ('lm_head.weight'): bytes 100 but dtype BF16 x shape [10, 10] is 200".
tl::expected<std::span<std::byte>, std::string> tensorMemoryOf(const wsync_tensor& tensor, const bus::TensorSpec& spec,
                                                               std::size_t index);
// The array itself: non-NULL unless empty, and no more entries than a manifest holds.
tl::expected<std::span<const wsync_tensor>, std::string> tensorArrayOf(const wsync_tensor* tensors, std::size_t count);

// A timeout of 0 or more milliseconds, cut to kLongestWait.
tl::expected<std::chrono::milliseconds, std::string> timeoutOf(std::int64_t milliseconds, std::string_view what);
// Waits longer than this are cut to it: a deadline further out could overflow the clock, and no caller waits a year.
inline constexpr std::chrono::milliseconds kLongestWait = std::chrono::hours(24 * 365);

// The header's enums as the schema's (their values are the schema's, checked where they are converted).
std::optional<msg::PauseMode> pauseModeOf(wsync_pause_mode mode);
std::optional<msg::ChannelKind> channelOf(wsync_channel channel);
// Whether this build of the library carries `channel` (the GPU channels need a build with CUDA).
bool builtWith(msg::ChannelKind channel);

// A copy the caller frees with wsync_string_free (malloc, so that free() in any runtime would do).
char* newCString(const std::string& text);

}  // namespace wsync::capi
