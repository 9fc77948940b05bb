#pragma once
// Test support: a client written from schemas/control.fbs alone: a plain ZeroMQ DEALER and the generated FlatBuffers
// builders, none of the agents' library. It can say what no agent would (a hello that lies, an enum out of range, a
// message of many parts), which is what the hostile-client tests need.
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "wsync/bus/protocol/message.hpp"
#include "wsync/bus/protocol/protocol.hpp"

namespace wsync::test {

class RawClient {
 public:
  // Connects a DEALER to `endpoint` under routing id "<label>#raw<random>". `receiveHighWaterMark`: messages the
  // socket queues for us before the coordinator's sends to us fail (1 makes a client that never reads cheap to be).
  RawClient(zmq::context_t& context, const std::string& endpoint, const std::string& label,
            int receiveHighWaterMark = 1000)
      : context_(context), socket_(context, zmq::socket_type::dealer) {
    std::random_device entropy;
    routingId_ = label + "#raw" + std::to_string(entropy());
    socket_.set(zmq::sockopt::routing_id, routingId_);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvhwm, receiveHighWaterMark);
    socket_.set(zmq::sockopt::sndhwm, 0);  // no limit on our side: the coordinator's own limits must hold
    socket_.connect(endpoint);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  ~RawClient() {
    // A null endpoint stops monitoring (zmq_socket_monitor(3)) before the monitor's PAIR goes.
    if (monitor_) (void)::zmq_socket_monitor(socket_.handle(), nullptr, 0);
  }

  // From now on, watches this client's connection for the peer dropping it (zmq_socket_monitor).
  void watchForDisconnect() {
    const std::string address = "inproc://raw-client-monitor-" + routingId_;
    if (::zmq_socket_monitor(socket_.handle(), address.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) throw zmq::error_t();
    monitor_.emplace(context_, zmq::socket_type::pair);
    monitor_->set(zmq::sockopt::linger, 0);
    monitor_->connect(address);
  }
  // Whether ZeroMQ reported the connection dropped within `timeout` (watchForDisconnect first). Once it has, the
  // connection's I/O thread is past its own clean-up, so closing the socket cannot race it.
  bool waitForDisconnect(std::chrono::milliseconds timeout) {
    if (!monitor_) return false;
    zmq::pollitem_t item{monitor_->handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return false;
    // An event is two frames: [u16 event, u32 value] and the endpoint.
    zmq::message_t event;
    zmq::message_t address;
    (void)monitor_->recv(event, zmq::recv_flags::none);
    (void)monitor_->recv(address, zmq::recv_flags::none);
    return true;
  }

  // Sends one message (one frame), stamped with `epoch` and the next request number; returns that number.
  template <typename Body>
  std::uint64_t send(bus::MessageBuilder& builder, flatbuffers::Offset<Body> body, std::uint64_t epoch = 0) {
    const auto bytes = builder.finish(body, bus::EnvelopeStamp{epoch, ++seq_});
    socket_.send(zmq::const_buffer(bytes.data(), bytes.size()), zmq::send_flags::none);
    return seq_;
  }

  // The next message that decodes and `accept`s, within `timeout`.
  template <typename Accept>
  std::optional<bus::Message> receive(Accept&& accept, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      zmq::message_t frame;
      while (socket_.recv(frame, zmq::recv_flags::dontwait)) {
        auto message = bus::Message::decode(std::move(frame));
        if (message && accept(*message)) return std::move(*message);
      }
    }
    return std::nullopt;
  }
  // The next message of type `Body`.
  template <typename Body>
  std::optional<bus::Message> receive(std::chrono::milliseconds timeout) {
    return receive([](const bus::Message& message) { return message.as<Body>() != nullptr; }, timeout);
  }

  // An AgentHello as an agent of this host would send it, with every field a test may want to bend.
  struct Hello {
    std::string agentId;
    msg::Role role = msg::Role::Worker;
    std::uint64_t appliedVersion = 0;
    std::uint32_t pid = static_cast<std::uint32_t>(::getpid());
    std::vector<msg::ChannelKind> channels{msg::ChannelKind::Shm};
    std::int32_t requestedRank = -1;
    // Empty: none (the coordinator then compares hostnames); another key than this host's: an agent elsewhere.
    std::string hostKey{};
    std::vector<std::pair<msg::ChannelKind, std::string>> contacts{};  // channel_contacts
    std::vector<std::uint8_t> secret{};                                // registration_secret: empty for none
  };
  std::uint64_t sendHello(const Hello& hello) {
    bus::MessageBuilder builder;
    auto& fbb = builder.fbb();
    std::array<char, 256> host{};
    ::gethostname(host.data(), host.size() - 1);
    const auto channels = fbb.CreateVector(hello.channels);
    std::vector<flatbuffers::Offset<msg::ChannelContact>> contacts;
    for (const auto& [kind, address] : hello.contacts) {
      contacts.push_back(msg::CreateChannelContact(fbb, kind, fbb.CreateString(address)));
    }
    const auto contactVector = fbb.CreateVector(contacts);
    const auto secret = hello.secret.empty() ? flatbuffers::Offset<flatbuffers::Vector<std::uint8_t>>()
                                             : fbb.CreateVector(hello.secret);
    return send(builder, msg::CreateAgentHello(fbb, fbb.CreateString(hello.agentId), hello.role, bus::kProtocolVersion,
                                               hello.requestedRank, 1, hello.pid, fbb.CreateString(host.data()),
                                               channels, hello.appliedVersion,
                                               hello.hostKey.empty() ? flatbuffers::Offset<flatbuffers::String>()
                                                                     : fbb.CreateString(hello.hostKey),
                                               contactVector, secret));
  }
  // Registers and returns the Welcome's epoch (nothing when refused or unanswered).
  std::optional<std::uint64_t> registerAs(const Hello& hello, std::chrono::milliseconds timeout) {
    sendHello(hello);
    auto reply = receive(
        [](const bus::Message& message) {
          return message.as<msg::Welcome>() != nullptr || message.as<msg::Error>() != nullptr;
        },
        timeout);
    if (!reply || reply->as<msg::Welcome>() == nullptr) return std::nullopt;
    const auto* welcome = reply->as<msg::Welcome>();
    epoch_ = welcome->epoch();
    slot_ = welcome->slot();
    secret_.clear();
    if (const auto* secret = welcome->registration_secret()) secret_.assign(secret->begin(), secret->end());
    return epoch_;
  }

  const std::string& routingId() const { return routingId_; }
  std::uint64_t epoch() const { return epoch_; }
  // The last Welcome's slot and registration secret.
  std::uint32_t slot() const { return slot_; }
  const std::vector<std::uint8_t>& secret() const { return secret_; }
  zmq::socket_t& socket() { return socket_; }

 private:
  zmq::context_t& context_;
  zmq::socket_t socket_;
  std::optional<zmq::socket_t> monitor_;
  std::string routingId_;
  std::uint64_t seq_ = 0;
  std::uint64_t epoch_ = 0;
  std::uint32_t slot_ = 0;
  std::vector<std::uint8_t> secret_;
};

}  // namespace wsync::test
