#pragma once
// A line-by-line connection to an agent, every read bounded: a socket pair whose other end is the agent's stdin and
// stdout (a write to a dead agent fails instead of raising SIGPIPE). The benchmark's end is close-on-exec, so no other
// agent inherits it and a read sees end-of-file once the agent is gone.
#include <chrono>
#include <optional>
#include <string>

namespace wsync::bench {

class LinePipe {
 public:
  LinePipe();  // a socket pair; throws BenchFailure
  // Over descriptors of this process (an agent's stdin and a copy of its stdout); closes them when destroyed.
  LinePipe(int readFd, int writeFd) : readFd_(readFd), writeFd_(writeFd) {}
  LinePipe(const LinePipe&) = delete;
  LinePipe& operator=(const LinePipe&) = delete;
  ~LinePipe();

  // The agent's end, to become its stdin and stdout; closed once the agent holds its copy.
  int peerFd() const { return peerFd_; }
  void closePeer();

  // The next line; nothing after `timeout` or once the other side closed (ended()). Throws on errors and Ctrl-C.
  std::optional<std::string> readLine(std::chrono::milliseconds timeout);
  bool ended() const { return ended_; }
  void writeLine(const std::string& line);

 private:
  int readFd_ = -1;
  int writeFd_ = -1;  // the same descriptor as readFd_ for the benchmark's end
  int peerFd_ = -1;
  bool ended_ = false;
  std::string buffered_;  // read but not yet returned
};

}  // namespace wsync::bench
