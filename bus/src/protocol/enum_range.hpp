#pragma once
// Private to bus/: the check that every enum-typed field of a verified envelope holds a value its enum declares.
// The FlatBuffers Verifier checks offsets and sizes, not enum ranges, so a verified `pause_mode: 200` would otherwise
// reach the roles. The walk follows the generated mini-reflection tables (flatc --reflect-names), so a field added
// to schemas/control.fbs is covered without a list to update. docs/messages.md, "Decoding", has the rule.
// Thread-safe: the per-type plan is built once, on first use.
#include <cstdint>
#include <string>

namespace wsync::bus::detail {

// Precondition, which verifyMessage() establishes: `envelope` is the start of an 8-byte aligned buffer the Verifier
// passed, whose [long] vectors are aligned (values are read in place).

// Whether every enum-typed field present holds a declared value. Allocates nothing: every received message pays it.
bool enumsInRange(const std::uint8_t* envelope);

// The first field that does not, for an operator: "ControlRequest.pause_mode = 200 is not one of Abort, Wait, Keep
// (0..2)". Empty when every field does.
std::string describeFirstEnumOutOfRange(const std::uint8_t* envelope);

}  // namespace wsync::bus::detail
