#pragma once
// One event of the bus as a JSON object, for `wsync-mon --json` (one object per line, for scripts):
// {"topic": "round/commit", "seq": 12, "epoch": "2e2c...", "sent_at_ns": ..., "type": "Commit", ...the body's fields}.
#include <string_view>

#include <nlohmann/json.hpp>

#include "wsync/bus/protocol/message.hpp"

namespace wsync::mon {

nlohmann::json eventJson(std::string_view topic, const bus::Message& event);

}  // namespace wsync::mon
