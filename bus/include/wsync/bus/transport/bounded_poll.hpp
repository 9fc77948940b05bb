#pragma once
// zmq_poll with a timeout that never means "forever". libzmq waits without limit on any negative timeout, and a
// timeout computed as "some point - now" goes negative whenever the thread is preempted between reading the clock
// and polling. A worker once hung in its shutdown for this: its I/O thread polled forever because, the trainer
// gone, nothing more came to wake it.
#include <chrono>
#include <cstddef>

#include <zmq.hpp>

namespace wsync::bus {

// Polls `items` for at most `timeout`; zero or less polls once without waiting. Returns how many items are ready;
// throws zmq::error_t as zmq::poll does (EINTR included).
int boundedPoll(zmq::pollitem_t* items, std::size_t count, std::chrono::milliseconds timeout);

}  // namespace wsync::bus
