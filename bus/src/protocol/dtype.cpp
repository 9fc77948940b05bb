#include "wsync/bus/protocol/dtype.hpp"

#include <array>
#include <utility>

namespace wsync::bus {
namespace {

struct DTypeInfo {
  msg::DType dtype;
  std::size_t bytes;
  std::string_view safetensorsName;
};

constexpr std::array<DTypeInfo, 15> kDTypes{{
    {msg::DType::Bool, 1, "BOOL"},
    {msg::DType::U8, 1, "U8"},
    {msg::DType::I8, 1, "I8"},
    {msg::DType::I16, 2, "I16"},
    {msg::DType::I32, 4, "I32"},
    {msg::DType::I64, 8, "I64"},
    {msg::DType::F16, 2, "F16"},
    {msg::DType::BF16, 2, "BF16"},
    {msg::DType::F32, 4, "F32"},
    {msg::DType::F64, 8, "F64"},
    {msg::DType::F8E4M3, 1, "F8_E4M3"},
    {msg::DType::F8E5M2, 1, "F8_E5M2"},
    {msg::DType::U16, 2, "U16"},
    {msg::DType::U32, 4, "U32"},
    {msg::DType::U64, 8, "U64"},
}};
static_assert(kDTypes.size() == static_cast<std::size_t>(msg::DType::MAX), "a new DType needs its size here");

const DTypeInfo* find(msg::DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return &info;
  }
  return nullptr;
}

}  // namespace

std::size_t elementBytes(msg::DType dtype) {
  const DTypeInfo* info = find(dtype);
  return info == nullptr ? 0 : info->bytes;
}

std::string_view safetensorsName(msg::DType dtype) {
  const DTypeInfo* info = find(dtype);
  return info == nullptr ? std::string_view("?") : info->safetensorsName;
}

std::optional<msg::DType> dtypeFromSafetensorsName(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.safetensorsName == name) return info.dtype;
  }
  return std::nullopt;
}

}  // namespace wsync::bus
