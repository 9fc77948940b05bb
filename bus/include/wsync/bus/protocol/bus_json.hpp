#pragma once
// The bus as JSON, one model for every face that shows it: an event as `wsync-mon --json` prints it and the C API's
// wsync_events_next returns it, and a coordinator's snapshot as `wsync-ctl status --json` prints it and
// wsync_bus_status returns it.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wsync/bus/protocol/message.hpp"

namespace wsync::bus {

// {"topic": "round/commit", "seq": 12, "epoch": "2e2c...", "sent_at_ns": ..., "type": "Commit", ...the body's fields}.
nlohmann::json eventJson(std::string_view topic, const bus::Message& event);

// {"bus": ..., "epoch": ..., "committed_version": ..., "phase": "idle", ..., "agents": [{...}, ...]}.
nlohmann::json snapshotJson(std::string_view busName, const msg::SnapshotReply& snapshot);

// The compact text of `value`, as every face prints it. Invalid UTF-8, which no text checked by the coordinator
// carries, is replaced rather than thrown on: a monitor never dies of one odd event.
std::string jsonText(const nlohmann::json& value);

}  // namespace wsync::bus
