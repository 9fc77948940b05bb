// Watching a bus without taking part: its status (one snapshot request, as wsync-ctl status --json) and its live
// events (a subscription, as wsync-mon --json), both as the JSON text the bus renders for the programs (bus_json).
#include <optional>

#include <zmq.hpp>

#include "boundary.hpp"
#include "wsync/bus/protocol/bus_json.hpp"
#include "wsync/bus/transport/bus_request.hpp"
#include "wsync/bus/transport/dealer_endpoint.hpp"
#include "wsync/bus/transport/event_subscriber.hpp"

struct wsync_events {
  zmq::context_t context{1};
  std::optional<wsync::bus::EventSubscriber> subscriber;  // after context: its socket closes first
};

using namespace wsync;

extern "C" {

wsync_status wsync_bus_status(const wsync_connection* connection, int64_t timeout_ms, char** json) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    if (json == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "json is NULL");
    *json = nullptr;
    if (connection == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "connection is NULL");
    auto timeout = capi::timeoutOf(timeout_ms, "timeout_ms");
    if (!timeout) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(timeout.error()));
    auto where = capi::connectionOf(*connection);
    if (!where) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(where.error()));
    zmq::context_t context(1);
    auto dealer = bus::DealerEndpoint::connect(context, where->endpoints.requests, "wsync-capi", where->curve);
    if (!dealer) return capi::fail(WSYNC_UNAVAILABLE, dealer.error().describe());
    bus::MessageBuilder builder;
    const auto request = builder.finish(msg::CreateSnapshotRequest(builder.fbb()), bus::EnvelopeStamp{0, 1});
    auto answer = bus::requestOnce(*dealer, request, *timeout);
    if (!answer) {
      switch (answer.error().code) {
        case bus::RequestError::NoAnswer:
          return capi::fail(WSYNC_TIMEOUT, "no coordinator answered on bus '" + where->bus + "' within " +
                                               std::to_string(timeout->count()) + " ms");
        case bus::RequestError::Transport:
        case bus::RequestError::Refused:
          return capi::fail(WSYNC_UNAVAILABLE, answer.error().describe());
        case bus::RequestError::Undecodable:
          break;
      }
      return capi::fail(WSYNC_INTERNAL, "bus '" + where->bus + "': " + answer.error().describe());
    }
    if (const auto* error = answer->as<msg::Error>()) {
      return capi::fail(WSYNC_UNAVAILABLE, std::string("the coordinator refused: ") +
                                               msg::EnumNameErrorCode(error->code()) + ": " +
                                               (error->detail() != nullptr ? error->detail()->str() : ""));
    }
    const auto* snapshot = answer->as<msg::SnapshotReply>();
    if (snapshot == nullptr) {
      return capi::fail(WSYNC_INTERNAL, std::string("the coordinator answered ") + bus::bodyName(answer->type()));
    }
    *json = capi::newCString(bus::jsonText(bus::snapshotJson(where->bus, *snapshot)));
    return WSYNC_OK;
  });
}

wsync_status wsync_events_open(const wsync_connection* connection, wsync_events** out) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    if (out == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (connection == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "connection is NULL");
    auto where = capi::connectionOf(*connection);
    if (!where) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(where.error()));
    auto events = std::make_unique<wsync_events>();
    auto subscriber = bus::EventSubscriber::connect(events->context, where->endpoints.events, {""}, where->curve);
    if (!subscriber) return capi::fail(WSYNC_UNAVAILABLE, subscriber.error().describe());
    events->subscriber.emplace(std::move(*subscriber));
    *out = events.release();
    return WSYNC_OK;
  });
}

wsync_status wsync_events_next(wsync_events* events, int64_t timeout_ms, char** json) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    if (json == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "json is NULL");
    *json = nullptr;
    if (events == nullptr) return capi::fail(WSYNC_INVALID_ARGUMENT, "events is NULL");
    auto timeout = capi::timeoutOf(timeout_ms, "timeout_ms");
    if (!timeout) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(timeout.error()));
    const auto deadline = std::chrono::steady_clock::now() + *timeout;
    while (true) {
      const auto left =
          std::max(std::chrono::milliseconds(0),
                   std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
      auto received = events->subscriber->receive(left);
      if (!received) return capi::fail(WSYNC_UNAVAILABLE, received.error().describe());
      if (!*received) return capi::fail(WSYNC_TIMEOUT, "no event within " + std::to_string(timeout->count()) + " ms");
      // One that does not decode is counted by the subscriber and skipped, as wsync-mon skips it.
      if ((*received)->message) {
        *json = capi::newCString(bus::jsonText(bus::eventJson((*received)->source, *(*received)->message)));
        return WSYNC_OK;
      }
      if (left.count() == 0) return capi::fail(WSYNC_TIMEOUT, "no event that decodes within the timeout");
    }
  });
}

void wsync_events_close(wsync_events* events) { capi::destroyHandle(__func__, events); }

}  // extern "C"
