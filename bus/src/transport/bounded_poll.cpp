#include "wsync/bus/transport/bounded_poll.hpp"

#include <algorithm>

namespace wsync::bus {

int boundedPoll(zmq::pollitem_t* items, std::size_t count, std::chrono::milliseconds timeout) {
  return zmq::poll(items, count, std::max(timeout, std::chrono::milliseconds(0)));
}

}  // namespace wsync::bus
