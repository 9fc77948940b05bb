#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>
#include <zmq.hpp>

#include "wsync/bus/protocol/received.hpp"
#include "wsync/bus/transport/curve.hpp"
#include "wsync/bus/transport/rejection_counters.hpp"
#include "wsync/bus/transport/transport_error.hpp"

namespace wsync::bus {

// A listener on the coordinator's event stream (agents, monitors): a SUB socket filtering by topic prefix.
// Subscribe before asking for a snapshot; events older than the snapshot's sequence are then skipped.
class EventSubscriber {
 public:
  // An empty prefix subscribes to every topic. `curve`: as for DealerEndpoint::connect.
  static tl::expected<EventSubscriber, TransportFailure> connect(zmq::context_t& context, const std::string& endpoint,
                                                                 const std::vector<std::string>& topicPrefixes,
                                                                 const std::optional<CurveClient>& curve = {});

  // Received::source is the event's topic.
  tl::expected<std::optional<Received>, TransportFailure> receive(std::chrono::milliseconds timeout);

  const RejectionCounters& rejections() const { return rejections_; }
  zmq::socket_ref handle() { return socket_; }

 private:
  explicit EventSubscriber(zmq::socket_t&& socket) : socket_(std::move(socket)) {}

  zmq::socket_t socket_;
  RejectionCounters rejections_;
};

}  // namespace wsync::bus
