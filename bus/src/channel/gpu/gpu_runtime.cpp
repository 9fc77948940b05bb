#include "wsync/bus/channel/gpu/gpu_runtime.hpp"

#include <cstring>

#include <cuda_runtime_api.h>

#include "wsync/bus/channel/nccl/nccl_library.hpp"
#include "wsync/bus/core/text.hpp"

namespace wsync::bus::gpu {

static_assert(kNcclUniqueIdBytes == NCCL_UNIQUE_ID_BYTES);
static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes);

int visibleDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the sticky error, report none
    return 0;
  }
  return count;
}

tl::expected<int, ChannelFailure> ncclVersion() {
  auto library = ncclLibrary();
  if (!library) return tl::unexpected(library.error());
  return (*library)->version;
}

tl::expected<NcclUniqueId, ChannelFailure> makeNcclUniqueId() {
  auto library = ncclLibrary();
  if (!library) return tl::unexpected(library.error());
  ncclUniqueId raw{};
  if (const ncclResult_t result = (*library)->getUniqueId(&raw); result != ncclSuccess) {
    return fail(ChannelError::CommunicatorError, std::string("ncclGetUniqueId: ") + (*library)->getErrorString(result) +
                                                     ": " + (*library)->getLastError(nullptr));
  }
  NcclUniqueId id;
  std::memcpy(id.data(), raw.internal, id.size());
  return id;
}

std::string toHex(const NcclUniqueId& id) { return hexBytes(id); }

tl::expected<NcclUniqueId, ChannelFailure> ncclUniqueIdFromHex(const std::string& hex) {
  if (hex.size() != 2 * kNcclUniqueIdBytes) {
    return fail(ChannelError::InvalidGeometry, "an NCCL unique id is " + std::to_string(2 * kNcclUniqueIdBytes) +
                                                   " hex digits, not " + std::to_string(hex.size()));
  }
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  NcclUniqueId id;
  for (std::size_t index = 0; index < id.size(); ++index) {
    const int high = digit(hex[2 * index]);
    const int low = digit(hex[2 * index + 1]);
    if (high < 0 || low < 0) return fail(ChannelError::InvalidGeometry, "the NCCL unique id is not hex");
    id[index] = static_cast<std::byte>(high * 16 + low);
  }
  return id;
}

}  // namespace wsync::bus::gpu
