#include "wsync/bus/channel/nccl/nccl_library.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace wsync::bus::gpu {
namespace {

// The SONAME NCCL 2 has kept for every release: the system's, a CUDA install's, or a pip nvidia-nccl wheel's (on
// LD_LIBRARY_PATH) all answer to it.
constexpr const char* kNcclSoname = "libnccl.so.2";

template <typename Function>
bool resolve(void* handle, const char* name, Function& function, std::string& missing) {
  function = reinterpret_cast<Function>(dlsym(handle, name));
  if (function == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  return function != nullptr;
}

tl::expected<NcclLibrary, ChannelFailure> load() {
  // Never unloaded: NCCL keeps threads and state for the life of the process.
  void* handle = dlopen(kNcclSoname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return fail(ChannelError::Unsupported, std::string("cannot load NCCL (") + kNcclSoname +
                                               "): " + (why != nullptr ? why : "unknown reason") +
                                               "; install NCCL or put its lib directory on LD_LIBRARY_PATH");
  }
  NcclLibrary library;
  std::string missing;
  resolve(handle, "ncclGetVersion", library.getVersion, missing);
  resolve(handle, "ncclGetUniqueId", library.getUniqueId, missing);
  resolve(handle, "ncclCommInitRankConfig", library.commInitRankConfig, missing);
  resolve(handle, "ncclCommGetAsyncError", library.commGetAsyncError, missing);
  resolve(handle, "ncclCommAbort", library.commAbort, missing);
  resolve(handle, "ncclCommFinalize", library.commFinalize, missing);
  resolve(handle, "ncclCommDestroy", library.commDestroy, missing);
  resolve(handle, "ncclBroadcast", library.broadcast, missing);
  resolve(handle, "ncclSend", library.send, missing);
  resolve(handle, "ncclRecv", library.recv, missing);
  resolve(handle, "ncclGroupStart", library.groupStart, missing);
  resolve(handle, "ncclGroupEnd", library.groupEnd, missing);
  resolve(handle, "ncclGetErrorString", library.getErrorString, missing);
  resolve(handle, "ncclGetLastError", library.getLastError, missing);
  if (!missing.empty()) {
    return fail(ChannelError::Unsupported,
                std::string(kNcclSoname) + " lacks " + missing + " (NCCL 2.14 or later is needed)");
  }
  // Optional: only the blocking child needs it (nccl_enqueue.hpp).
  library.commSplit = reinterpret_cast<decltype(library.commSplit)>(dlsym(handle, "ncclCommSplit"));
  if (library.getVersion(&library.version) != ncclSuccess) {
    return fail(ChannelError::Unsupported, std::string(kNcclSoname) + ": ncclGetVersion failed");
  }
  return library;
}

}  // namespace

tl::expected<const NcclLibrary*, ChannelFailure> ncclLibrary() {
  static const tl::expected<NcclLibrary, ChannelFailure> loaded = load();
  if (!loaded) return tl::unexpected(loaded.error());
  return &*loaded;
}

}  // namespace wsync::bus::gpu
