#pragma once
// An agent's store of the holdings and bindings of region rounds (docs/regions.md), and the plans it computes from
// them. The coordinator sends each declaration once to each agent and names it by digest in every TransferPlan
// after; the agent keeps what it was sent, and builds the plan of a layout (manifest, holdings, bindings) once and
// reuses it for every round of that layout. A receiver bound whole is named by the zero digest: every agent derives
// those bindings from the manifest.
//
// Threading: the agent's I/O thread only.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include <wsync/schemas/control_generated.h>
#include <tl/expected.hpp>

#include "wsync/bus/channel/region_plan.hpp"
#include "wsync/bus/protocol/manifest.hpp"
#include "wsync/bus/protocol/region.hpp"

namespace wsync::bus {

// Declarations kept by digest: every rank of the largest sharded trainers and the bindings of as many workers.
inline constexpr std::size_t kKeptDeclarations = 2 * kMaxSources + 4096;
// Layouts whose plans are kept: a bus runs one layout for many rounds; a few cover a worker joining or leaving.
inline constexpr std::size_t kKeptRegionPlans = 4;

class RegionDeclarations {
 public:
  // What the coordinator sent. A declaration that does not decode is refused with the reason; the round that needs
  // it then fails naming its digest.
  tl::expected<void, RegionFailure> add(const msg::Holdings& message);
  tl::expected<void, RegionFailure> add(const msg::Bindings& message);
  // What this agent declared itself (its hello's bindings, its BeginUpdate's holdings): never sent back to it.
  void addOwn(const ReceiverBindings& bindings);
  void addOwn(const SourceHoldings& holdings, const Digest& manifest);

  // The plan of region TransferPlan `plan` over `manifest`, or why there is none (a digest this agent was never
  // sent, a layout that does not plan).
  tl::expected<std::shared_ptr<const RegionPlan>, std::string> planFor(const msg::TransferPlan& plan,
                                                                       const Manifest& manifest);

 private:
  struct DigestLess {
    bool operator()(const Digest& a, const Digest& b) const { return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo; }
  };
  struct Holdings {
    SourceHoldings holdings;
    Digest manifest;
  };
  struct KeptPlan {
    Digest layout;
    std::shared_ptr<const RegionPlan> plan;
  };

  // Bounded: the oldest declaration goes first.
  void remember(const Digest& digest);

  std::map<Digest, Holdings, DigestLess> holdings_;
  std::map<Digest, ReceiverBindings, DigestLess> bindings_;
  std::deque<Digest> order_;    // every kept digest, oldest first
  std::deque<KeptPlan> plans_;  // newest first
};

}  // namespace wsync::bus
