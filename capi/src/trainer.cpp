// The trainer agent behind wsync_trainer_*: a manifest declared from tensor descriptions, versions published from
// caller memory (checked against the manifest here, so that a mismatch names the tensor), outcomes as wsync_outcome.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "boundary.hpp"
#include "wsync/bus/channel/registry.hpp"
#include "wsync/bus/protocol/client_text.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/protocol/region.hpp"
#include "wsync/trainer_agent/trainer_agent.hpp"
#include "wsync/worker_agent/worker_bindings.hpp"

struct wsync_trainer {
  std::unique_ptr<wsync::trainer_agent::TrainerAgent> agent;
  // A version was published and its outcome not yet handed to the caller: what wsync_trainer_wait waits for.
  bool awaitingOutcome = false;
  // The memory of the last accepted publish, what WSYNC_PUBLISH_SAME_TENSORS publishes again.
  std::vector<std::span<const std::byte>> lastTensors;
  bool published = false;
  // Layout tokens (PublishOptions::layoutToken): each array given gets a new one, never reused; a publish of the same
  // tensors repeats lastTensors' own, so the GPU channels do not read the array again.
  std::uint64_t tokensIssued = 0;
  std::uint64_t lastTensorsToken = 0;
  // wsync_trainer_declare_holdings: a publish then takes one tensor per region.
  std::optional<wsync::bus::SourceHoldings> holdings;
};

namespace wsync::capi {
namespace {

constexpr std::array kTrainerConfigFields{
    WSYNC_CAPI_FIELD(wsync_trainer_config, connection),  WSYNC_CAPI_FIELD(wsync_trainer_config, agent_id),
    WSYNC_CAPI_FIELD(wsync_trainer_config, rank),        WSYNC_CAPI_FIELD(wsync_trainer_config, channel),
    WSYNC_CAPI_FIELD(wsync_trainer_config, cuda_device),
};
static_assert(sizeof(wsync_trainer_config) == 64 && offsetof(wsync_trainer_config, cuda_device) == 56,
              "ABI 1's layout");

constexpr std::array kPublishOptionsFields{
    WSYNC_CAPI_FIELD(wsync_publish_options, label),
    WSYNC_CAPI_FIELD(wsync_publish_options, pause_mode),
    WSYNC_CAPI_FIELD(wsync_publish_options, flags),
};
// ABI 1's 24 bytes, then flags (a caller built before it passes struct_size 24 and gets none).
static_assert(sizeof(wsync_publish_options) == 32 && offsetof(wsync_publish_options, flags) == 24);
constexpr std::uint64_t kKnownPublishFlags = WSYNC_PUBLISH_ALLOCATIONS_KEPT | WSYNC_PUBLISH_SAME_TENSORS;

constexpr std::array kOutcomeFields{
    WSYNC_CAPI_FIELD(wsync_outcome, kind),          WSYNC_CAPI_FIELD(wsync_outcome, abort_reason),
    WSYNC_CAPI_FIELD(wsync_outcome, refusal),       WSYNC_CAPI_FIELD(wsync_outcome, version),
    WSYNC_CAPI_FIELD(wsync_outcome, round),         WSYNC_CAPI_FIELD(wsync_outcome, bytes),
    WSYNC_CAPI_FIELD(wsync_outcome, digest_lo),     WSYNC_CAPI_FIELD(wsync_outcome, digest_hi),
    WSYNC_CAPI_FIELD(wsync_outcome, until_plan_ns), WSYNC_CAPI_FIELD(wsync_outcome, sending_ns),
    WSYNC_CAPI_FIELD(wsync_outcome, total_ns),      WSYNC_CAPI_FIELD(wsync_outcome, detail),
};
static_assert(sizeof(wsync_outcome) == 80 + WSYNC_DETAIL_CHARS && offsetof(wsync_outcome, detail) == 80,
              "ABI 1's layout");

constexpr std::array kProgressFields{
    WSYNC_CAPI_FIELD(wsync_progress, version),
    WSYNC_CAPI_FIELD(wsync_progress, bytes_sent),
    WSYNC_CAPI_FIELD(wsync_progress, bytes_total),
    WSYNC_CAPI_FIELD(wsync_progress, sending),
};
static_assert(sizeof(wsync_progress) == 40, "ABI 1's layout");

static_assert(WSYNC_OUTCOME_COMMITTED == static_cast<int>(trainer_agent::OutcomeKind::Committed) &&
              WSYNC_OUTCOME_ABORTED == static_cast<int>(trainer_agent::OutcomeKind::Aborted) &&
              WSYNC_OUTCOME_REFUSED == static_cast<int>(trainer_agent::OutcomeKind::Refused));

wsync_trainer_config trainerDefaults() {
  wsync_trainer_config config{};
  config.struct_size = sizeof(config);
  config.rank = -1;
  config.channel = WSYNC_CHANNEL_SHM;
  return config;
}

wsync_publish_options publishDefaults() {
  wsync_publish_options options{};
  options.struct_size = sizeof(options);
  options.pause_mode = WSYNC_PAUSE_KEEP;
  return options;
}

tl::expected<trainer_agent::TrainerOptions, std::pair<wsync_status, std::string>> optionsOf(
    const wsync_trainer_config& config) {
  auto invalid = [](std::string text) { return tl::unexpected(std::pair{WSYNC_INVALID_ARGUMENT, std::move(text)}); };
  auto identity = agentIdentityOf(config.connection, config.agent_id, config.rank);
  if (!identity) return invalid(std::move(identity.error()));
  const auto channel = channelOf(config.channel);
  if (!channel) return invalid("channel is " + std::to_string(config.channel) + ": not a wsync_channel");
  if (!builtWith(*channel)) {
    return tl::unexpected(std::pair{WSYNC_UNSUPPORTED, "channel " + bus::channelName(*channel) +
                                                           ": this build of libwsync has no GPU channels (built "
                                                           "without CUDA)"});
  }
  if (config.cuda_device < 0) return invalid("cuda_device is " + std::to_string(config.cuda_device));
  trainer_agent::TrainerOptions options;
  std::move(*identity).moveInto(options);
  options.channel = *channel;
  options.cudaDevice = config.cuda_device;
  return options;
}

wsync_status failWith(const trainer_agent::TrainerFailure& failure) {
  switch (failure.code) {
    case trainer_agent::TrainerError::Session:
      return fail(WSYNC_UNAVAILABLE, failure.describe());
    case trainer_agent::TrainerError::Busy:
      return fail(WSYNC_BUSY, failure.describe());
    case trainer_agent::TrainerError::Stopped:
      return fail(WSYNC_STOPPED, failure.describe());
    case trainer_agent::TrainerError::InvalidManifest:
    case trainer_agent::TrainerError::InvalidHoldings:
    case trainer_agent::TrainerError::NoManifest:
      return fail(WSYNC_INVALID_ARGUMENT, failure.describe());
    case trainer_agent::TrainerError::BufferMismatch:
      return fail(WSYNC_MANIFEST_MISMATCH, failure.describe());
  }
  return fail(WSYNC_INTERNAL, failure.describe());
}

// Each tensor as the manifest has it, in its order: the spans to publish, or the first that differs.
// Whether `tensor` carries exactly the manifest's entry `index` (name, dtype, shape) and memory of its size.
bool matchesDeclared(const wsync_tensor& tensor, const bus::Manifest& manifest, std::size_t index) {
  const bus::TensorSpec& declared = manifest.tensors()[index];
  if (tensor.name == nullptr || tensor.dtype != static_cast<wsync_dtype>(declared.dtype) ||
      tensor.ndim != declared.shape.size() || (tensor.ndim > 0 && tensor.shape == nullptr) ||
      tensor.bytes != manifest.tensorBytes(index) || (tensor.data == nullptr && tensor.bytes > 0)) {
    return false;
  }
  // strncmp stops at the first difference, so a name longer than the declared one is not read past its end + 1.
  if (std::strncmp(tensor.name, declared.name.c_str(), declared.name.size() + 1) != 0) return false;
  return std::equal(declared.shape.begin(), declared.shape.end(), tensor.shape);
}

tl::expected<std::vector<std::span<const std::byte>>, std::pair<wsync_status, std::string>> publishedTensors(
    const bus::Manifest& manifest, std::span<const wsync_tensor> tensors) {
  auto status = [](wsync_status code, std::string text) { return tl::unexpected(std::pair{code, std::move(text)}); };
  if (tensors.size() != manifest.size()) {
    return status(WSYNC_MANIFEST_MISMATCH,
                  std::to_string(tensors.size()) + " tensors for a manifest of " + std::to_string(manifest.size()));
  }
  std::vector<std::span<const std::byte>> spans;
  spans.reserve(tensors.size());
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    // A tensor equal to its declared entry is valid (the manifest was validated): taken without building a string,
    // so that publishing 18,867 tensors costs no allocation per tensor. Anything else gets the full diagnosis.
    if (matchesDeclared(tensors[index], manifest, index)) {
      spans.emplace_back(static_cast<const std::byte*>(tensors[index].data), tensors[index].bytes);
      continue;
    }
    auto spec = tensorSpecOf(tensors[index], index);
    if (!spec) return status(WSYNC_INVALID_ARGUMENT, std::move(spec.error()));
    const bus::TensorSpec& declared = manifest.tensors()[index];
    const std::string which = "tensor " + std::to_string(index) + " ('" + spec->name + "')";
    if (spec->name != declared.name) {
      return status(WSYNC_MANIFEST_MISMATCH, which + ": the manifest has '" + declared.name + "' there");
    }
    if (spec->dtype != declared.dtype || spec->shape != declared.shape) {
      return status(WSYNC_MANIFEST_MISMATCH, which + ": dtype " + msg::EnumNameDType(spec->dtype) + " x shape " +
                                                 worker_agent::formatShape(spec->shape) + ", the manifest says " +
                                                 msg::EnumNameDType(declared.dtype) + " x " +
                                                 worker_agent::formatShape(declared.shape));
    }
    auto memory = tensorMemoryOf(tensors[index], *spec, index);
    if (!memory) return status(WSYNC_INVALID_ARGUMENT, std::move(memory.error()));
    spans.emplace_back(*memory);
  }
  return spans;
}

// The same for a rank of a sharded trainer: one tensor per held region, carrying its manifest tensor's name and dtype
// and the region's extents as its shape.
tl::expected<std::vector<std::span<const std::byte>>, std::pair<wsync_status, std::string>> publishedRegions(
    const bus::Manifest& manifest, const bus::SourceHoldings& holdings, std::span<const wsync_tensor> tensors) {
  auto status = [](wsync_status code, std::string text) { return tl::unexpected(std::pair{code, std::move(text)}); };
  if (tensors.size() != holdings.regions.size()) {
    return status(WSYNC_MANIFEST_MISMATCH, std::to_string(tensors.size()) + " tensors for holdings of " +
                                               std::to_string(holdings.regions.size()) + " regions");
  }
  std::vector<std::span<const std::byte>> spans;
  spans.reserve(tensors.size());
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    auto spec = tensorSpecOf(tensors[index], index);
    if (!spec) return status(WSYNC_INVALID_ARGUMENT, std::move(spec.error()));
    const bus::HeldRegion& held = holdings.regions[index];
    const bus::TensorSpec& declared = manifest.tensors()[held.tensor];
    const std::string which = "tensor " + std::to_string(index) + " ('" + spec->name + "')";
    if (spec->name != declared.name || spec->dtype != declared.dtype || spec->shape != held.box.extent) {
      return status(WSYNC_MANIFEST_MISMATCH, which + ": " + msg::EnumNameDType(spec->dtype) + " x " +
                                                 worker_agent::formatShape(spec->shape) + ", and region " +
                                                 std::to_string(index) + " is '" + declared.name + "' " +
                                                 bus::format(held.box) + " (" + msg::EnumNameDType(declared.dtype) +
                                                 " x " + worker_agent::formatShape(held.box.extent) + ")");
    }
    auto memory = tensorMemoryOf(tensors[index], *spec, index);
    if (!memory) return status(WSYNC_INVALID_ARGUMENT, std::move(memory.error()));
    spans.emplace_back(*memory);
  }
  return spans;
}

wsync_outcome outcomeOf(const trainer_agent::PublishOutcome& outcome) {
  wsync_outcome out{};
  out.struct_size = sizeof(out);
  out.kind = static_cast<wsync_outcome_kind>(outcome.kind);
  out.abort_reason = static_cast<wsync_abort_reason>(outcome.reason);
  out.refusal = static_cast<wsync_refusal>(outcome.refusal);
  out.version = outcome.version;
  out.round = outcome.round;
  out.bytes = outcome.bytes;
  out.digest_lo = outcome.digest.lo;
  out.digest_hi = outcome.digest.hi;
  out.until_plan_ns = outcome.untilPlan.count();
  out.sending_ns = outcome.sending.count();
  out.total_ns = outcome.total.count();
  // Cut at a character boundary: never inside a UTF-8 sequence, whose continuation bytes are 10xxxxxx.
  std::size_t length = std::min(outcome.detail.size(), sizeof(out.detail) - 1);
  while (length > 0 && length < outcome.detail.size() &&
         (static_cast<unsigned char>(outcome.detail[length]) & 0xC0) == 0x80) {
    --length;
  }
  std::memcpy(out.detail, outcome.detail.data(), length);
  out.detail[length] = '\0';
  return out;
}

}  // namespace
}  // namespace wsync::capi

using namespace wsync;

extern "C" {

void wsync_trainer_config_init(wsync_trainer_config* config) {
  if (config != nullptr) *config = capi::trainerDefaults();
}

void wsync_publish_options_init(wsync_publish_options* options) {
  if (options != nullptr) *options = capi::publishDefaults();
}

wsync_status wsync_trainer_start(const wsync_trainer_config* config, wsync_trainer** out) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    auto read = capi::startConfig(out, config, capi::trainerDefaults(), capi::kTrainerConfigFields);
    if (!read) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(read.error()));
    auto options = capi::optionsOf(*read);
    if (!options) return capi::fail(options.error().first, std::move(options.error().second));
    auto agent = trainer_agent::TrainerAgent::start(std::move(*options));
    if (!agent) return capi::failWith(agent.error());
    *out = new wsync_trainer{.agent = std::move(*agent),
                             .awaitingOutcome = false,
                             .lastTensors = {},
                             .published = false,
                             .tokensIssued = 0,
                             .lastTensorsToken = 0,
                             .holdings = {}};
    return WSYNC_OK;
  });
}

wsync_status wsync_trainer_declare_manifest(wsync_trainer* trainer, const wsync_tensor* tensors, size_t count) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    if (trainer == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "trainer is NULL");
    auto array = capi::tensorArrayOf(tensors, count);
    if (!array) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(array.error()));
    if (array->empty()) return capi::fail(WSYNC_INVALID_ARGUMENT, "a manifest needs at least one tensor");
    std::vector<bus::TensorSpec> specs;
    specs.reserve(array->size());
    for (std::size_t index = 0; index < array->size(); ++index) {
      auto spec = capi::tensorSpecOf((*array)[index], index);
      if (!spec) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(spec.error()));
      specs.push_back(std::move(*spec));
    }
    if (auto declared = trainer->agent->declareManifest(std::move(specs)); !declared) {
      return capi::failWith(declared.error());
    }
    trainer->lastTensors.clear();  // another manifest's memory is never published again
    trainer->published = false;
    trainer->holdings.reset();
    return WSYNC_OK;
  });
}

wsync_status wsync_trainer_declare_holdings(wsync_trainer* trainer, const wsync_region* regions, size_t count,
                                            uint32_t source_rank, uint32_t source_count) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    if (trainer == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "trainer is NULL");
    if (!trainer->agent->manifest()) {
      return capi::fail(WSYNC_INVALID_ARGUMENT, "no manifest: call wsync_trainer_declare_manifest first");
    }
    if (count > 0 && regions == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "regions is NULL");
    if (count > bus::kMaxRegionsPerAgent) {
      return capi::fail(WSYNC_INVALID_ARGUMENT,
                        std::to_string(count) + " regions, at most " + std::to_string(bus::kMaxRegionsPerAgent));
    }
    bus::SourceHoldings holdings;
    holdings.regions.reserve(count);
    for (std::size_t index = 0; index < count; ++index) {
      const wsync_region& region = regions[index];
      const std::string which = "region " + std::to_string(index) + ": ndim " + std::to_string(region.ndim);
      if (region.ndim > bus::kMaxTensorRank) {
        return capi::fail(WSYNC_INVALID_ARGUMENT, which + " is above " + std::to_string(bus::kMaxTensorRank));
      }
      if (region.ndim > 0 && (region.offset == nullptr || region.extent == nullptr)) {
        return capi::fail(WSYNC_INVALID_ARGUMENT, which + " but its offset or extent is NULL");
      }
      holdings.regions.push_back(bus::HeldRegion{
          region.tensor, bus::Box{std::vector<std::int64_t>(region.offset, region.offset + region.ndim),
                                  std::vector<std::int64_t>(region.extent, region.extent + region.ndim)}});
    }
    if (auto declared = trainer->agent->declareHoldings(holdings, source_rank, source_count); !declared) {
      return capi::failWith(declared.error());
    }
    trainer->holdings = std::move(holdings);
    trainer->lastTensors.clear();  // of the whole tensors: never published as regions
    trainer->published = false;
    return WSYNC_OK;
  });
}

wsync_status wsync_trainer_publish(wsync_trainer* trainer, uint64_t version, const wsync_tensor* tensors, size_t count,
                                   const wsync_publish_options* options) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    if (trainer == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "trainer is NULL");
    wsync_publish_options given = capi::publishDefaults();
    if (options != nullptr) {
      auto read = capi::readVersioned(options, capi::publishDefaults(), capi::kPublishOptionsFields, "options");
      if (!read) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(read.error()));
      given = *read;
    }
    const auto pauseMode = capi::pauseModeOf(given.pause_mode);
    if (!pauseMode) {
      return capi::fail(WSYNC_INVALID_ARGUMENT,
                        "options->pause_mode is " + std::to_string(given.pause_mode) + ": not a wsync_pause_mode");
    }
    if ((given.flags & ~capi::kKnownPublishFlags) != 0) {
      return capi::fail(WSYNC_INVALID_ARGUMENT,
                        "options->flags has unknown bits " + std::to_string(given.flags & ~capi::kKnownPublishFlags));
    }
    auto label = capi::optionalText(given.label, "options->label", bus::kMaxLabelBytes);
    if (!label) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(label.error()));
    if (*label) {
      if (std::string why = bus::checkClientText("label", **label, bus::kMaxLabelBytes); !why.empty()) {
        return capi::fail(WSYNC_INVALID_ARGUMENT, "options->" + why);
      }
    }
    const auto& manifest = trainer->agent->manifest();
    if (!manifest) return capi::fail(WSYNC_INVALID_ARGUMENT, "no manifest: call wsync_trainer_declare_manifest first");
    const bool same = (given.flags & WSYNC_PUBLISH_SAME_TENSORS) != 0;
    std::vector<std::span<const std::byte>> checked;
    if (same) {
      if (tensors != nullptr || count != 0) {
        return capi::fail(WSYNC_INVALID_ARGUMENT,
                          "WSYNC_PUBLISH_SAME_TENSORS takes no tensors (NULL, 0), not " + std::to_string(count));
      }
      if (!trainer->published) {
        return capi::fail(WSYNC_INVALID_ARGUMENT,
                          "WSYNC_PUBLISH_SAME_TENSORS repeats the previous publish's tensors, and none was accepted "
                          "since the manifest was declared");
      }
    } else {
      auto array = capi::tensorArrayOf(tensors, count);
      if (!array) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(array.error()));
      auto spans = trainer->holdings ? capi::publishedRegions(*manifest, *trainer->holdings, *array)
                                     : capi::publishedTensors(*manifest, *array);
      if (!spans) return capi::fail(spans.error().first, std::move(spans.error().second));
      checked = std::move(*spans);
    }
    const std::uint64_t token = same ? trainer->lastTensorsToken : ++trainer->tokensIssued;
    trainer_agent::PublishOptions publishOptions{.label = label->value_or(""),
                                                 .pauseMode = *pauseMode,
                                                 .allocationsKept = (given.flags & WSYNC_PUBLISH_ALLOCATIONS_KEPT) != 0,
                                                 .layoutToken = token};
    const auto& spans = same ? trainer->lastTensors : checked;
    if (auto published = trainer->agent->publish(version, spans, std::move(publishOptions)); !published) {
      return capi::failWith(published.error());
    }
    trainer->awaitingOutcome = true;
    if (!same) {
      trainer->lastTensors = std::move(checked);
      trainer->lastTensorsToken = token;
    }
    trainer->published = true;
    return WSYNC_OK;
  });
}

wsync_status wsync_trainer_wait(wsync_trainer* trainer, int64_t timeout_ms, wsync_outcome* outcome) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    if (trainer == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "trainer is NULL");
    if (outcome == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "outcome is NULL");
    auto timeout = capi::timeoutOf(timeout_ms, "timeout_ms");
    if (!timeout) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(timeout.error()));
    if (!trainer->awaitingOutcome) {
      return capi::fail(WSYNC_INVALID_ARGUMENT, "nothing is in flight: publish a version first");
    }
    const auto known = trainer->agent->waitOutcome(*timeout);
    if (!known) {
      if (trainer->agent->stopped()) return capi::fail(WSYNC_STOPPED, "the trainer agent stopped");
      return capi::fail(WSYNC_TIMEOUT, "no outcome yet for the version in flight");
    }
    if (auto written = capi::writeVersioned(outcome, capi::outcomeOf(*known), capi::kOutcomeFields, "outcome");
        !written) {
      return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(written.error()));
    }
    trainer->awaitingOutcome = false;
    return WSYNC_OK;
  });
}

wsync_status wsync_trainer_progress(const wsync_trainer* trainer, wsync_progress* progress) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    if (trainer == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "trainer is NULL");
    if (progress == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "progress is NULL");
    const trainer_agent::PublishProgress now = trainer->agent->progress();
    wsync_progress out{};
    out.struct_size = sizeof(out);
    out.version = now.version;
    out.bytes_sent = now.bytesSent;
    out.bytes_total = now.bytesTotal;
    out.sending = now.sending ? 1 : 0;
    if (auto written = capi::writeVersioned(progress, out, capi::kProgressFields, "progress"); !written) {
      return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(written.error()));
    }
    return WSYNC_OK;
  });
}

uint64_t wsync_trainer_committed_version(const wsync_trainer* trainer) {
  return trainer == nullptr ? 0 : trainer->agent->committedVersion();
}

int32_t wsync_trainer_rank(const wsync_trainer* trainer) { return trainer == nullptr ? -1 : trainer->agent->rank(); }

void wsync_trainer_destroy(wsync_trainer* trainer) {
  capi::destroyHandle(__func__, trainer);  // TrainerAgent::stop(): a version in flight is aborted, then goodbye
}

}  // extern "C"
