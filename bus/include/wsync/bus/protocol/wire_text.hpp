#pragma once
// A FlatBuffers string field as text: absent is empty (the Verifier has checked its bounds already).

#include <string>

#include <flatbuffers/flatbuffers.h>

namespace wsync::bus {

inline std::string text(const flatbuffers::String* string) { return string ? string->str() : std::string(); }

}  // namespace wsync::bus
