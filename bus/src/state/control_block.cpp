#include "wsync/bus/state/control_block.hpp"
#include "wsync/bus/core/segment_name.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include <boost/interprocess/shared_memory_object.hpp>

#include "core/private_segment.hpp"
#include "wsync/bus/core/clock.hpp"
#include "wsync/bus/core/process_identity.hpp"
#include "wsync/bus/core/text.hpp"
#include "wsync/bus/protocol/protocol.hpp"
#include "wsync/bus/transport/bus_address.hpp"

namespace wsync::bus {
namespace bip = boost::interprocess;
namespace {

// A writer keeps a sequence odd for well under a microsecond; a reader that still sees it odd after this many
// tries is looking at a writer that died mid-update, and gives up rather than spin.
constexpr int kSequenceReadAttempts = 100'000;

constexpr std::size_t kBlockBytes = sizeof(ControlBlockData);

// A sequence lock without fences (Boehm, "Can seqlocks get along with programming language memory models?"):
// inside a section the writer stores with kStoreInSection (release) and readers load with kLoadInSection (acquire).
// A reader that sees any value of an unfinished write then also sees the odd counter stored before it, and its
// closing counter load cannot move above its data loads. On x86 these are plain moves, as relaxed ones would be,
// and ThreadSanitizer, which does not model standalone fences, understands them.
constexpr std::memory_order kStoreInSection = std::memory_order_release;
constexpr std::memory_order kLoadInSection = std::memory_order_acquire;

// Writes under a sequence counter: odd while writing. The writer is the only one, so no compare-exchange.
template <typename Write>
void writeSequenced(std::atomic<std::uint64_t>& sequence, Write&& write) {
  const std::uint64_t start = sequence.load(std::memory_order_relaxed);
  sequence.store(start + 1, std::memory_order_relaxed);
  write();
  sequence.store(start + 2, std::memory_order_release);
}

// Reads under a sequence counter; `read` must be safe on torn values (they are discarded).
template <typename Read>
bool readSequenced(const std::atomic<std::uint64_t>& sequence, Read&& read) {
  for (int attempt = 0; attempt < kSequenceReadAttempts; ++attempt) {
    const std::uint64_t before = sequence.load(std::memory_order_acquire);
    if ((before & 1U) != 0) continue;
    read();
    if (sequence.load(std::memory_order_relaxed) == before) return true;
  }
  return false;
}

template <std::size_t Bytes>
void storeBytes(AtomicBytesData<Bytes>& target, std::span<const std::uint8_t> bytes) {
  std::array<std::uint8_t, Bytes> padded{};
  // An empty span may carry a null pointer, which memcpy must not get even for zero bytes.
  if (!bytes.empty()) std::memcpy(padded.data(), bytes.data(), std::min(bytes.size(), Bytes));
  for (std::size_t word = 0; word < Bytes / 8; ++word) {
    std::uint64_t value = 0;
    std::memcpy(&value, padded.data() + word * 8, 8);
    target.words[word].store(value, kStoreInSection);
  }
}

template <std::size_t Bytes>
std::array<std::uint8_t, Bytes> loadBytes(const AtomicBytesData<Bytes>& source) {
  std::array<std::uint8_t, Bytes> bytes{};
  for (std::size_t word = 0; word < Bytes / 8; ++word) {
    const std::uint64_t value = source.words[word].load(kLoadInSection);
    std::memcpy(bytes.data() + word * 8, &value, 8);
  }
  return bytes;
}

template <std::size_t Bytes>
void storeText(AtomicBytesData<Bytes>& target, std::string_view text) {
  storeBytes(target, {reinterpret_cast<const std::uint8_t*>(text.data()), std::min(text.size(), Bytes - 1)});
}

template <std::size_t Bytes>
std::string loadText(const AtomicBytesData<Bytes>& source) {
  const auto bytes = loadBytes(source);
  const auto end = std::find(bytes.begin(), bytes.end() - 1, std::uint8_t{0});
  return std::string(bytes.begin(), end);
}

// BusStateData::operatorPause: 0 for none, else 1 + the mode.
std::uint32_t packOperatorPause(std::optional<msg::PauseMode> mode) {
  return mode ? 1U + static_cast<std::uint32_t>(*mode) : 0U;
}

std::optional<msg::PauseMode> unpackOperatorPause(std::uint32_t word) {
  if (word == 0) return std::nullopt;
  const std::uint32_t mode = word - 1;
  // A word no build of ours writes (another layout, damage) is read as the safest pause: abort.
  if (mode > static_cast<std::uint32_t>(msg::PauseMode::MAX)) return msg::PauseMode::Abort;
  return static_cast<msg::PauseMode>(mode);
}

std::uint64_t newEpoch() {
  std::random_device entropy;
  const std::uint64_t epoch = (std::uint64_t{entropy()} << 32) ^ entropy() ^ monotonicMillis();
  return epoch == 0 ? 1 : epoch;
}

tl::unexpected<ControlBlockFailure> systemFailure(const std::string& what, const bip::interprocess_exception& e) {
  return fail(ControlBlockError::SystemError, what + ": " + e.what());
}

tl::expected<void, ControlBlockFailure> checkPrivate(const bip::shared_memory_object& shm, const std::string& name) {
  auto size = detail::privateSegmentSize(shm, name);
  if (!size) {
    return fail(size.error().unsafe ? ControlBlockError::Unsafe : ControlBlockError::SystemError, size.error().detail);
  }
  if (*size == 0) return fail(ControlBlockError::NotInitialized, name + " is still being created");
  if (*size < kBlockBytes) {
    return fail(ControlBlockError::LayoutMismatch,
                name + " is " + std::to_string(*size) + " bytes, expected " + std::to_string(kBlockBytes));
  }
  return {};
}

tl::expected<void, ControlBlockFailure> checkHeader(const ControlHeaderData& header, const std::string& name) {
  const std::uint64_t magic = header.magic.load(std::memory_order_acquire);
  if (magic == 0) return fail(ControlBlockError::NotInitialized, name + " is still being initialised");
  if (magic != kControlBlockMagic || header.layoutVersion != kControlBlockLayoutVersion ||
      header.maxAgents != kMaxAgents || header.segmentBytes != kBlockBytes) {
    return fail(ControlBlockError::LayoutMismatch, name + " has layout " + std::to_string(header.layoutVersion) +
                                                       ", this build reads " +
                                                       std::to_string(kControlBlockLayoutVersion));
  }
  return {};
}

// The coordinator that created an existing segment, if it still runs.
std::optional<std::uint32_t> liveCreatorOf(const std::string& segment) {
  try {
    bip::shared_memory_object shm(bip::open_only, segment.c_str(), bip::read_only);
    if (!checkPrivate(shm, segment)) return std::nullopt;
    bip::mapped_region region(shm, bip::read_only, 0, kBlockBytes);
    const auto& header = static_cast<const ControlBlockData*>(region.get_address())->header;
    if (!checkHeader(header, segment)) return std::nullopt;
    const ProcessIdentity creator{header.creatorPid, header.creatorStartTicks};
    if (isAlive(creator)) return creator.pid;
  } catch (const bip::interprocess_exception&) {
    // Missing or unreadable: nobody we could clobber.
  }
  return std::nullopt;
}

// What a dead coordinator's block says, if it is one of ours and of this layout.
std::optional<ReplacedBlock> readReplaced(const std::string& segment) {
  try {
    bip::shared_memory_object shm(bip::open_only, segment.c_str(), bip::read_only);
    if (!checkPrivate(shm, segment)) return std::nullopt;
    bip::mapped_region region(shm, bip::read_only, 0, kBlockBytes);
    const auto& data = *static_cast<const ControlBlockData*>(region.get_address());
    if (!checkHeader(data.header, segment)) return std::nullopt;
    ReplacedBlock replaced;
    replaced.creatorPid = data.header.creatorPid;
    replaced.epoch = data.header.epoch;
    replaced.committedVersion = data.bus.committedVersion.load(std::memory_order_acquire);
    replaced.committedRound = data.bus.committedRound.load(std::memory_order_acquire);
    replaced.lastRound = unpackRound(data.bus.roundWord.load(std::memory_order_acquire)).round;
    replaced.operatorPause = unpackOperatorPause(data.bus.operatorPause.load(std::memory_order_acquire));
    replaced.committedDigest = Digest{data.bus.committedDigestLo.load(std::memory_order_acquire),
                                      data.bus.committedDigestHi.load(std::memory_order_acquire)};
    return replaced;
  } catch (const bip::interprocess_exception&) {
    return std::nullopt;  // missing or unreadable: nothing to carry on
  }
}

}  // namespace

std::string controlBlockSegmentName(std::string_view busName) { return segmentName(busName); }

tl::expected<ControlBlockView, ControlBlockFailure> ControlBlockView::map(std::string_view busName, bool writable) {
  auto name = validateBusName(busName);
  if (!name) return fail(ControlBlockError::InvalidBusName, name.error().detail);
  const std::string segment = controlBlockSegmentName(*name);
  const bip::mode_t mode = writable ? bip::read_write : bip::read_only;
  try {
    bip::shared_memory_object shm(bip::open_only, segment.c_str(), mode);
    if (auto safe = checkPrivate(shm, segment); !safe) return tl::unexpected(safe.error());
    bip::mapped_region region(shm, mode, 0, kBlockBytes);
    const auto& header = static_cast<const ControlBlockData*>(region.get_address())->header;
    if (auto valid = checkHeader(header, segment); !valid) return tl::unexpected(valid.error());
    return ControlBlockView(std::move(region), segment);
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error) {
      return fail(ControlBlockError::NoCoordinator, "no control block " + segment + " for bus '" + *name + "'");
    }
    return systemFailure(segment, e);
  }
}

tl::expected<ControlBlockView, ControlBlockFailure> ControlBlockView::open(std::string_view busName) {
  return map(busName, false);
}

PauseState ControlBlockView::pauseState() const {
  return unpackPause(data().bus.pauseWord.load(std::memory_order_acquire));
}

bool ControlBlockView::coordinatorAlive() const {
  return isAlive(ProcessIdentity{data().header.creatorPid, data().header.creatorStartTicks});
}

std::optional<msg::PauseMode> ControlBlockView::operatorPause() const {
  return unpackOperatorPause(data().bus.operatorPause.load(std::memory_order_acquire));
}

RoundState ControlBlockView::roundState() const {
  return unpackRound(data().bus.roundWord.load(std::memory_order_acquire));
}

std::optional<AgentSlotSnapshot> ControlBlockView::agentSlot(std::uint32_t slot) const {
  if (slot >= kMaxAgents) return std::nullopt;
  const AgentSlotData& source = data().agents[slot];
  AgentSlotSnapshot snapshot;
  snapshot.slot = slot;
  const bool consistent = readSequenced(source.sequence, [&] {
    snapshot.generation = source.generation.load(kLoadInSection);
    snapshot.occupancy = static_cast<SlotOccupancy>(source.occupancy.load(kLoadInSection));
    snapshot.role = static_cast<msg::Role>(source.role.load(kLoadInSection));
    snapshot.rank = source.rank.load(kLoadInSection);
    snapshot.pid = source.pid.load(kLoadInSection);
    snapshot.agentId = loadText(source.agentId);
  });
  if (!consistent) return std::nullopt;
  // The agent publishes its fields with claimedGeneration last (release), so the acquire here covers them.
  snapshot.agentAttached =
      snapshot.generation != 0 && source.claimedGeneration.load(std::memory_order_acquire) == snapshot.generation;
  snapshot.appliedVersion = source.appliedVersion.load(std::memory_order_acquire);
  snapshot.heartbeatMs = source.heartbeatMs.load(std::memory_order_acquire);
  snapshot.phase = static_cast<AgentPhase>(source.phase.load(std::memory_order_acquire));
  snapshot.transferRound = source.transferRound.load(std::memory_order_relaxed);
  snapshot.transferBytes = source.transferBytes.load(std::memory_order_relaxed);
  return snapshot;
}

tl::expected<AgentSlotWriter, ControlBlockFailure> AgentSlotWriter::attach(std::string_view busName, std::uint32_t slot,
                                                                           std::string_view agentId,
                                                                           std::uint64_t appliedVersion,
                                                                           std::optional<std::uint64_t> epoch) {
  if (slot >= kMaxAgents) {
    return fail(ControlBlockError::SlotOutOfRange,
                "slot " + std::to_string(slot) + " of " + std::to_string(kMaxAgents));
  }
  auto view = map(busName, true);
  if (!view) return tl::unexpected(view.error());
  if (epoch && view->epoch() != *epoch) {
    return fail(ControlBlockError::SlotMismatch, view->segmentName() +
                                                     " belongs to another coordinator than the one that welcomed "
                                                     "this agent (its epoch is " +
                                                     hex64(view->epoch()) + ", the Welcome's " + hex64(*epoch) + ")");
  }
  auto snapshot = view->agentSlot(slot);
  if (!snapshot || snapshot->occupancy != SlotOccupancy::Active || snapshot->agentId != agentId) {
    return fail(ControlBlockError::SlotMismatch, "slot " + std::to_string(slot) + " holds '" +
                                                     (snapshot ? snapshot->agentId : "?") + "', not '" +
                                                     std::string(agentId) + "'");
  }
  AgentSlotWriter writer(std::move(*view), slot);
  AgentSlotData& mine = writer.mine();
  mine.appliedVersion.store(appliedVersion, std::memory_order_relaxed);
  mine.phase.store(static_cast<std::uint32_t>(AgentPhase::Idle), std::memory_order_relaxed);
  mine.transferRound.store(0, std::memory_order_relaxed);
  mine.transferBytes.store(0, std::memory_order_relaxed);
  mine.heartbeatMs.store(monotonicMillis(), std::memory_order_relaxed);
  mine.claimedGeneration.store(snapshot->generation, std::memory_order_release);
  return writer;
}

tl::expected<ControlBlockOwner, ControlBlockFailure> ControlBlockOwner::create(std::string_view busName) {
  auto name = validateBusName(busName);
  if (!name) return fail(ControlBlockError::InvalidBusName, name.error().detail);
  const std::string segment = controlBlockSegmentName(*name);

  auto lock = BusLock::acquire(*name);
  if (!lock) return tl::unexpected(lock.error());
  // Holding the name, only a coordinator in another network namespace that shares this /dev/shm (a container with
  // the host's ipc but its own network) could still own the segment: its header names a live creator.
  if (const auto pid = liveCreatorOf(segment)) {
    return fail(ControlBlockError::BusInUse,
                "bus '" + *name + "' is run by coordinator pid " + std::to_string(*pid) + " (segment " + segment + ")");
  }
  // Whatever is left under the name belonged to a coordinator that died: replace it, keeping what it committed.
  const std::optional<ReplacedBlock> replaced = readReplaced(segment);
  bip::shared_memory_object::remove(segment.c_str());

  try {
    bip::permissions privateToUser(0600);
    bip::shared_memory_object shm(bip::create_only, segment.c_str(), bip::read_write, privateToUser);
    shm.truncate(static_cast<bip::offset_t>(kBlockBytes));  // new pages read as zero: every field starts at 0
    bip::mapped_region region(shm, bip::read_write, 0, kBlockBytes);
    auto& header = static_cast<ControlBlockData*>(region.get_address())->header;
    const ProcessIdentity self = currentProcess();
    header.layoutVersion = kControlBlockLayoutVersion;
    header.maxAgents = kMaxAgents;
    header.segmentBytes = kBlockBytes;
    header.epoch = newEpoch();
    header.creatorPid = self.pid;
    header.creatorStartTicks = self.startTicks;
    header.coordinatorHeartbeatMs.store(monotonicMillis(), std::memory_order_relaxed);
    auto& state = static_cast<ControlBlockData*>(region.get_address())->bus;
    if (replaced) {
      state.committedVersion.store(replaced->committedVersion, std::memory_order_relaxed);
      state.committedRound.store(replaced->committedRound, std::memory_order_relaxed);
      state.operatorPause.store(packOperatorPause(replaced->operatorPause), std::memory_order_relaxed);
      state.committedDigestLo.store(replaced->committedDigest.lo, std::memory_order_relaxed);
      state.committedDigestHi.store(replaced->committedDigest.hi, std::memory_order_relaxed);
    }
    header.magic.store(kControlBlockMagic, std::memory_order_release);  // publishes the block
    ControlBlockOwner owner(std::move(region), segment, std::move(*lock));
    owner.replaced_ = replaced;
    return owner;
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(segment.c_str());
    return systemFailure(segment, e);
  }
}

ControlBlockOwner::~ControlBlockOwner() {
  if (removeOnDestroy_) bip::shared_memory_object::remove(segmentName().c_str());
}

void ControlBlockOwner::setCommitted(std::uint64_t version, std::uint64_t round, const Digest& digest) {
  data().bus.committedDigestLo.store(digest.lo, std::memory_order_release);
  data().bus.committedDigestHi.store(digest.hi, std::memory_order_release);
  data().bus.committedRound.store(round, std::memory_order_release);
  data().bus.committedVersion.store(version, std::memory_order_release);
}

void ControlBlockOwner::setPauseState(const PauseState& state) {
  data().bus.pauseWord.store(packPause(state), std::memory_order_release);
}

void ControlBlockOwner::setOperatorPause(std::optional<msg::PauseMode> mode) {
  data().bus.operatorPause.store(packOperatorPause(mode), std::memory_order_release);
}

void ControlBlockOwner::setRoundState(const RoundState& state) {
  data().bus.roundWord.store(packRound(state), std::memory_order_release);
}

std::optional<std::uint32_t> ControlBlockOwner::findFreeSlot() const {
  for (std::uint32_t slot = 0; slot < kMaxAgents; ++slot) {
    if (data().agents[slot].occupancy.load(std::memory_order_relaxed) ==
        static_cast<std::uint32_t>(SlotOccupancy::Free)) {
      return slot;
    }
  }
  return std::nullopt;
}

tl::expected<void, ControlBlockFailure> ControlBlockOwner::assignSlot(std::uint32_t slot,
                                                                      const SlotAssignment& assignment) {
  if (slot >= kMaxAgents) return fail(ControlBlockError::SlotOutOfRange, "slot " + std::to_string(slot));
  if (assignment.agentId.empty() || assignment.agentId.size() > kMaxAgentIdBytes) {
    return fail(ControlBlockError::SlotMismatch,
                "agent id must be 1 to " + std::to_string(kMaxAgentIdBytes) + " bytes");
  }
  AgentSlotData& target = data().agents[slot];
  writeSequenced(target.sequence, [&] {
    target.generation.store(target.generation.load(kLoadInSection) + 1, kStoreInSection);
    target.occupancy.store(static_cast<std::uint32_t>(SlotOccupancy::Active), kStoreInSection);
    target.role.store(static_cast<std::uint32_t>(assignment.role), kStoreInSection);
    target.rank.store(assignment.rank, kStoreInSection);
    target.pid.store(assignment.pid, kStoreInSection);
    storeText(target.agentId, assignment.agentId);
  });
  updateActiveAgents();
  return {};
}

tl::expected<void, ControlBlockFailure> ControlBlockOwner::writeRemoteAgent(std::uint32_t slot,
                                                                            const RemoteAgentState& state) {
  if (slot >= kMaxAgents) return fail(ControlBlockError::SlotOutOfRange, "slot " + std::to_string(slot));
  AgentSlotData& target = data().agents[slot];
  // The same stores, in the same order, as AgentSlotWriter::attach and its setters.
  target.appliedVersion.store(state.appliedVersion, std::memory_order_release);
  target.phase.store(static_cast<std::uint32_t>(state.phase), std::memory_order_release);
  target.transferRound.store(state.transferRound, std::memory_order_relaxed);
  target.transferBytes.store(state.transferBytes, std::memory_order_relaxed);
  target.heartbeatMs.store(state.heartbeatMs, std::memory_order_release);
  target.claimedGeneration.store(target.generation.load(std::memory_order_acquire), std::memory_order_release);
  return {};
}

tl::expected<void, ControlBlockFailure> ControlBlockOwner::setOccupancy(std::uint32_t slot, SlotOccupancy occupancy) {
  if (slot >= kMaxAgents) return fail(ControlBlockError::SlotOutOfRange, "slot " + std::to_string(slot));
  AgentSlotData& target = data().agents[slot];
  writeSequenced(target.sequence, [&] {
    target.occupancy.store(static_cast<std::uint32_t>(occupancy), kStoreInSection);
    if (occupancy == SlotOccupancy::Free) {
      target.role.store(static_cast<std::uint32_t>(msg::Role::Unknown), kStoreInSection);
      target.rank.store(-1, kStoreInSection);
      target.pid.store(0, kStoreInSection);
      storeText(target.agentId, {});
    }
  });
  updateActiveAgents();
  return {};
}

void ControlBlockOwner::updateActiveAgents() {
  std::uint32_t active = 0;
  for (const AgentSlotData& slot : data().agents) {
    active += slot.occupancy.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(SlotOccupancy::Active);
  }
  data().bus.activeAgents.store(active, std::memory_order_release);
}

}  // namespace wsync::bus
