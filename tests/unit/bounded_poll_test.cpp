// boundedPoll: a timeout already passed polls once and returns, where zmq::poll would wait forever; a positive one
// still waits for a message. Each poll runs on its own thread so that a regression fails the test instead of
// hanging it: the peer's message then frees the thread.
#include "wsync/bus/transport/bounded_poll.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>

#include <zmq.hpp>

namespace wsync::bus {
namespace {

// Only a poll that waits without limit takes this long; a bounded one returns in microseconds.
constexpr std::chrono::seconds kHangBound{10};

class BoundedPoll : public ::testing::Test {
 protected:
  void SetUp() override {
    receiver_.bind(endpoint_);
    sender_.connect(endpoint_);
  }
  std::future<int> pollAsync(std::chrono::milliseconds timeout) {
    return std::async(std::launch::async, [this, timeout] {
      zmq::pollitem_t item{receiver_.handle(), 0, ZMQ_POLLIN, 0};
      return boundedPoll(&item, 1, timeout);
    });
  }
  // Frees a poll stuck in zmq_poll, so that the future's destructor can join its thread.
  void release() { sender_.send(zmq::str_buffer("release"), zmq::send_flags::dontwait); }

  const std::string endpoint_ = "inproc://bounded-poll-test";
  zmq::context_t context_{1};
  zmq::socket_t receiver_{context_, zmq::socket_type::pair};
  zmq::socket_t sender_{context_, zmq::socket_type::pair};
};

TEST_F(BoundedPoll, ATimeoutAlreadyPassedDoesNotWaitForever) {
  for (const auto timeout : {std::chrono::milliseconds(-1), std::chrono::milliseconds(-250)}) {
    auto polled = pollAsync(timeout);
    const bool returned = polled.wait_for(kHangBound) == std::future_status::ready;
    if (!returned) release();
    ASSERT_TRUE(returned) << "a poll with a timeout of " << timeout.count() << " ms waited without limit";
    EXPECT_EQ(polled.get(), 0) << "nothing was sent";
  }
}

TEST_F(BoundedPoll, APositiveTimeoutStillWaitsForAMessage) {
  auto polled = pollAsync(std::chrono::milliseconds(60'000));
  sender_.send(zmq::str_buffer("hello"), zmq::send_flags::none);
  ASSERT_EQ(polled.wait_for(kHangBound), std::future_status::ready);
  EXPECT_EQ(polled.get(), 1);
}

}  // namespace
}  // namespace wsync::bus
