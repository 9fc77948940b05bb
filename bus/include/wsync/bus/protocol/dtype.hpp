#pragma once
// Element types: their sizes and their safetensors names.
#include <cstddef>
#include <optional>
#include <string_view>

#include <wsync/schemas/control_generated.h>

namespace wsync::bus {

// Bytes per element; 0 for Unknown and for values this build does not know.
std::size_t elementBytes(msg::DType dtype);

// "BF16", "F8_E4M3", ... as safetensors writes them; "?" for values this build does not know.
std::string_view safetensorsName(msg::DType dtype);
std::optional<msg::DType> dtypeFromSafetensorsName(std::string_view name);

}  // namespace wsync::bus
