#pragma once
// Holdings and bindings on the wire (schemas/control.fbs: Holdings, Bindings; docs/regions.md). Decoding checks what
// the encoding promises (every box as long as its extent list, ranks and counts within the protocol's limits) and
// that the digest sent with a declaration is the digest of what it declares, so that a recipient may cache "this
// digest is these regions" without being tricked; what the regions mean for a manifest is checkHoldings' and
// checkBindings' (region.hpp).
#include <flatbuffers/flatbuffers.h>
#include <wsync/schemas/control_generated.h>
#include <tl/expected.hpp>

#include "wsync/bus/protocol/region.hpp"

namespace wsync::bus {

// `manifest`: the digest of the manifest the holdings' tensor indices refer to.
flatbuffers::Offset<msg::Holdings> toMessage(flatbuffers::FlatBufferBuilder& fbb, const SourceHoldings& holdings,
                                             const Digest& manifest);
flatbuffers::Offset<msg::Bindings> toMessage(flatbuffers::FlatBufferBuilder& fbb, const ReceiverBindings& bindings);

struct DecodedHoldings {
  SourceHoldings holdings;
  Digest digest;
  Digest manifest;
};

tl::expected<DecodedHoldings, RegionFailure> holdingsFromMessage(const msg::Holdings& message);
tl::expected<ReceiverBindings, RegionFailure> bindingsFromMessage(const msg::Bindings& message);

}  // namespace wsync::bus
