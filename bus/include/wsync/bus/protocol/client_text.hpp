#pragma once
// Text that came from a client (an agent id, a label, a refusal's detail, an operator's reason) on its way into the
// coordinator's state, logs and events. Checked or made safe in one place, so that no client can put a control
// byte in a log line, a NUL in an id, or megabytes in every monitor's event stream.
#include <cstddef>
#include <string>
#include <string_view>

#include "wsync/bus/protocol/protocol.hpp"

namespace wsync::bus {

// `text` made printable and bounded: bytes outside printable ASCII and well-formed UTF-8 (control bytes, NUL,
// invalid sequences) as \xNN, and cut at `maxBytes` of the original with the number of bytes left out. For logs and
// forwarded detail texts, where refusing would lose the explanation.
std::string printableText(std::string_view text, std::size_t maxBytes = kMaxClientTextBytes);

// Why `text` cannot be kept as it is (a label, an id), or empty when it can: at most `maxBytes`, well-formed UTF-8,
// no control characters (U+0000-U+001F, U+007F). `what` names it in the answer ("label").
std::string checkClientText(std::string_view what, std::string_view text, std::size_t maxBytes);

// Why `agentId` cannot name an agent, or empty when it can: 1 to kMaxAgentIdBytes bytes of printable ASCII without
// spaces. It becomes a ZeroMQ routing id prefix, a control-block slot's name and a column in every tool.
std::string checkAgentId(std::string_view agentId);

}  // namespace wsync::bus
