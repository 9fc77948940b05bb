#pragma once
// The one rule for naming a bus's per-user resources (the control block, the shm arena, the cuda_ipc segment, the
// bus lock's abstract socket): "wsync-<effective uid>-<bus>[-<part>]". The effective uid, because that is who owns
// a segment it creates and whom the mode 0600 admits: a setuid program must find the segments it can open.
#include <string>
#include <string_view>

namespace wsync::bus {

std::string segmentName(std::string_view busName, std::string_view part = {});

}  // namespace wsync::bus
