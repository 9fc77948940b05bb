#pragma once
// Files a run leaves that nothing will use again, since its bus names are unique to the run: libzmq 4.3 keeps ipc
// socket files after the socket closes, and a killed coordinator leaves its segments. Removed when the owner of
// this object goes away, which must be after the sockets and control blocks that use them.
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wsync::bench {

class RunFiles {
 public:
  RunFiles() = default;
  RunFiles(const RunFiles&) = delete;
  RunFiles& operator=(const RunFiles&) = delete;
  ~RunFiles() {
    for (const std::string& path : paths_) std::remove(path.c_str());
  }

  void add(std::string path) { paths_.push_back(std::move(path)); }
  // The file behind an ipc:// endpoint; other transports have none.
  void addEndpoint(std::string_view endpoint) {
    constexpr std::string_view kIpc = "ipc://";
    if (endpoint.starts_with(kIpc)) add(std::string(endpoint.substr(kIpc.size())));
  }

 private:
  std::vector<std::string> paths_;
};

}  // namespace wsync::bench
