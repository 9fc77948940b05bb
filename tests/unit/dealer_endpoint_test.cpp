// DealerEndpoint's lifetime against libzmq's socket monitor: an agent replaces its endpoint when the coordinator
// restarts, and the replacement must reach the new coordinator. libzmq sends monitor events from its I/O thread
// with a blocking send; an endpoint that closed its monitor's reading end before stopping the monitor left that
// thread blocked on the old connection's next event, and the replacement (same context, same I/O thread) never
// connected. The race needs the old connection's retry to land while the endpoint closes, so the test repeats the
// restart many times with the close spread over one retry interval.
#include "wsync/bus/transport/dealer_endpoint.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include <zmq.hpp>

namespace wsync::bus {
namespace {

using Clock = std::chrono::steady_clock;

// Restarts per run: the old code hung the I/O thread in about one of ten on a 2-core machine.
constexpr int kRestarts = 60;
// ZeroMQ's default reconnect interval: the old connection's retry lands somewhere in this after its peer left.
constexpr std::chrono::milliseconds kRetryInterval{100};
// A working replacement's message arrives in milliseconds; only a hung I/O thread takes this long.
constexpr std::chrono::seconds kDeliveryBound{5};

// A stand-in for the coordinator's request socket: a ROUTER on one loopback port, closed and bound again.
class Peer {
 public:
  explicit Peer(zmq::context_t& context, const std::string& endpoint) : socket_(context, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind(endpoint);
  }
  std::string endpoint() const { return socket_.get(zmq::sockopt::last_endpoint); }
  // The payload of the next message from any dealer, waiting up to `timeout`.
  std::optional<std::string> receive(std::chrono::milliseconds timeout) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
    zmq::message_t routingId;
    zmq::message_t payload;
    if (!socket_.recv(routingId) || !routingId.more() || !socket_.recv(payload)) return std::nullopt;
    return payload.to_string();
  }

 private:
  zmq::socket_t socket_;
};

bool sendText(DealerEndpoint& dealer, const std::string& text) {
  return dealer.send({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()}).has_value();
}

TEST(DealerEndpoint, AReplacementReachesARestartedPeerHoweverTheOldConnectionsRetryLands) {
  zmq::context_t context(1);  // one I/O thread, as in an agent
  std::optional<Peer> peer;
  peer.emplace(context, "tcp://127.0.0.1:*");
  const std::string endpoint = peer->endpoint();
  auto dealer = DealerEndpoint::connect(context, endpoint, "probe");
  ASSERT_TRUE(dealer) << dealer.error().describe();
  for (int restart = 0; restart < kRestarts; ++restart) {
    const std::string greeting = "hello " + std::to_string(restart);
    ASSERT_TRUE(sendText(*dealer, greeting));
    ASSERT_EQ(peer->receive(std::chrono::duration_cast<std::chrono::milliseconds>(kDeliveryBound)), greeting)
        << "restart " << restart << ": the replacement connection never reached the restarted peer";

    // The peer goes away; the dealer sees its link lost and keeps retrying, as ZeroMQ does by itself.
    peer.reset();
    const auto deadline = Clock::now() + kDeliveryBound;
    while (!dealer->linkLost() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(dealer->linkLost()) << "restart " << restart;
    // The peer comes back, and the old endpoint is closed at some point of its retry interval: its retry may
    // connect and handshake while it closes.
    peer.emplace(context, endpoint);
    std::this_thread::sleep_for(kRetryInterval * (restart % 4) / 2);
    dealer = DealerEndpoint::connect(context, endpoint, "probe");
    ASSERT_TRUE(dealer) << dealer.error().describe();
  }
}

}  // namespace
}  // namespace wsync::bus
