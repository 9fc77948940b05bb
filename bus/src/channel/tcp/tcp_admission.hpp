#pragma once
// The admission of one tcp transfer's receivers (docs/tcp-channel.md, "Admission"): the sender's listener listens
// while it lasts; every connection it accepts is a pending handshake, all of them polled at once beside the
// receivers already admitted, and each dropped unless it presents a whole hello within kTcpHelloDeadline; a hello
// with the round's token, this source's index, a free index of an expected receiver and that receiver's payload size
// is admitted, any other answered why not and closed. In a round of one sender every receiver is expected with the
// same payload; in a region round only those that take a segment from this source, each with its own.
// Once every receiver is in, the listener stops listening and whatever is still pending is dropped. Strangers thus
// hold at most kMaxTcpPendingHandshakes descriptors, each for at most the deadline, and only while a send admits.
//
// Threading: the sending thread only.
#include <poll.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <tl/expected.hpp>

#include "channel/tcp/tcp_socket.hpp"
#include "channel/tcp/tcp_wire.hpp"
#include "wsync/bus/channel/channel_error.hpp"
#include "wsync/bus/channel/tcp/tcp_listener.hpp"

namespace wsync::bus::tcp {

// A connection admitted as receiver `index`: the Admitted answer is the sender's to send, ahead of the payload.
struct AdmittedReceiver {
  std::uint32_t index = 0;
  Socket socket;
  std::string label;  // "receiver 'w0' (index 2, 10.0.0.7:51234)": how every error names it
};

// What the sender expects of receiver i: the payload it moves to it, or nothing when the receiver takes nothing
// from this sender (it does not connect, and one that does is refused).
using ExpectedPayloads = std::vector<std::optional<std::uint64_t>>;

class ReceiverAdmission {
 public:
  ReceiverAdmission(std::uint64_t transfer, std::span<const std::uint8_t> token, std::uint32_t source,
                    ExpectedPayloads payloads, TcpListener& listener, std::string senderAgentId);
  // Stops listening (whatever happened) and logs what was dropped or refused, once per transfer.
  ~ReceiverAdmission();
  ReceiverAdmission(const ReceiverAdmission&) = delete;
  ReceiverAdmission& operator=(const ReceiverAdmission&) = delete;

  // Starts listening.
  tl::expected<void, ChannelFailure> start();
  // Whether every receiver is in (the admission is closed).
  bool complete() const { return admitted_ == expected_; }
  std::uint32_t admitted() const { return admitted_; }
  std::uint32_t expected() const { return expected_; }
  // Receivers expected and not admitted yet, by index.
  std::vector<std::uint32_t> missing() const;

  // Drops the pending connections past their deadline, then appends what to poll this pass: the listener while it
  // listens, then every pending handshake. `handle` takes those entries back after the poll.
  void addPollEntries(std::vector<pollfd>& fds);
  // The entries addPollEntries added, polled: reads hellos, answers and closes those refused, accepts what the
  // listener holds, and appends the connections admitted to `admitted`. Closes the admission once all are in.
  tl::expected<void, ChannelFailure> handle(std::span<const pollfd> polled, std::vector<AdmittedReceiver>& admitted);

 private:
  struct Pending {
    Socket socket;
    std::chrono::steady_clock::time_point deadline;  // dropped past it (kTcpHelloDeadline after its accept)
    std::array<std::byte, kHelloBytes> hello{};
    std::size_t helloRead = 0;
  };

  // Accepts what the listener holds (at most kMaxTcpPendingHandshakes a pass: a flood cannot hold the loop here),
  // making room by dropping the oldest pending connection when there are too many or no descriptor is left.
  tl::expected<void, ChannelFailure> acceptAll();
  // Reads a connection's hello; once whole, admits it (taking its socket) or answers why not and closes it. A
  // connection left without a socket is finished with.
  void readHello(Pending& connection, std::vector<AdmittedReceiver>& admitted);
  void refuse(Pending& connection, Admission admission, Refusal refusal, const std::string& why);
  // Every receiver is in: nobody else may connect, and whoever is still saying hello is not one of them.
  void close();

  const std::uint64_t transfer_;
  const std::span<const std::uint8_t> token_;
  const std::uint32_t source_;
  const ExpectedPayloads payloads_;
  TcpListener& listener_;
  const std::string senderAgentId_;  // in every answer
  std::vector<std::string> labels_;  // by index: the admitted receiver's label, empty while missing
  std::uint32_t expected_ = 0;
  std::uint32_t admitted_ = 0;
  std::deque<Pending> pending_;  // oldest first
  bool polledListener_ = false;  // whether the last addPollEntries put the listener first
  int refusals_ = 0;
  std::uint64_t late_ = 0;       // dropped without a whole hello by their deadline
  std::uint64_t displaced_ = 0;  // dropped for a newer connection's room
};

}  // namespace wsync::bus::tcp
