// The calling thread's last error, the library's versions, and the names of the header's values.
#include <cstdlib>

#include "boundary.hpp"
#include "wsync/bus/core/log.hpp"
#include "wsync/bus/protocol/dtype.hpp"

namespace wsync::capi {

namespace {

// One per thread, so that a failure on one thread never shows up as another's (docs/c-api.md).
thread_local std::string lastErrorText;
// Set when even the text of a failure could not be stored (out of memory): a static text instead.
thread_local const char* lastErrorFallback = nullptr;

}  // namespace

wsync_status fail(wsync_status status, std::string text) {
  lastErrorText = std::move(text);
  lastErrorFallback = nullptr;
  return status;
}

wsync_status failInternal(const char* function, const char* what) noexcept {
  try {
    lastErrorText = std::string("internal error in ") + function + ": " + what;
    lastErrorFallback = nullptr;
  } catch (...) {
    lastErrorFallback = "internal error: out of memory while recording the error";
  }
  return WSYNC_INTERNAL;
}

void clearLastError() noexcept {
  lastErrorText.clear();  // keeps its capacity: never allocates
  lastErrorFallback = nullptr;
}

}  // namespace wsync::capi

using namespace wsync;

static_assert(WSYNC_OK == 0 && WSYNC_INTERNAL == 8, "status values are part of the ABI");
static_assert(WSYNC_DTYPE_BOOL == static_cast<int>(msg::DType::Bool) &&
                  WSYNC_DTYPE_BF16 == static_cast<int>(msg::DType::BF16) &&
                  WSYNC_DTYPE_F8_E4M3 == static_cast<int>(msg::DType::F8E4M3) &&
                  WSYNC_DTYPE_F8_E5M2 == static_cast<int>(msg::DType::F8E5M2) &&
                  WSYNC_DTYPE_U64 == static_cast<int>(msg::DType::U64) && msg::DType::MAX == msg::DType::U64,
              "the header's dtypes are the schema's");

extern "C" {

uint32_t wsync_abi_version(void) { return WSYNC_ABI_VERSION; }

const char* wsync_version(void) { return WSYNC_VERSION_TEXT; }

const char* wsync_last_error(void) {
  return capi::lastErrorFallback != nullptr ? capi::lastErrorFallback : capi::lastErrorText.c_str();
}

const char* wsync_status_name(wsync_status status) {
  switch (status) {
    case WSYNC_OK:
      return "ok";
    case WSYNC_TIMEOUT:
      return "timeout";
    case WSYNC_INVALID_ARGUMENT:
      return "invalid_argument";
    case WSYNC_UNAVAILABLE:
      return "unavailable";
    case WSYNC_MANIFEST_MISMATCH:
      return "manifest_mismatch";
    case WSYNC_BUSY:
      return "busy";
    case WSYNC_STOPPED:
      return "stopped";
    case WSYNC_UNSUPPORTED:
      return "unsupported";
    case WSYNC_INTERNAL:
      return "internal";
    default:
      return "unknown";
  }
}

uint32_t wsync_dtype_size(wsync_dtype dtype) {
  return static_cast<uint32_t>(bus::elementBytes(static_cast<msg::DType>(dtype)));
}

// The schema's names: FlatBuffers' generated lookups answer "" outside an enum's range, and Unknown (0) is no dtype.
const char* wsync_dtype_name(wsync_dtype dtype) {
  const char* name = msg::EnumNameDType(static_cast<msg::DType>(dtype));
  return dtype == 0 || *name == '\0' ? "unknown" : name;
}

const char* wsync_abort_reason_name(wsync_abort_reason reason) {
  const char* name = msg::EnumNameAbortReason(static_cast<msg::AbortReason>(reason));
  return *name == '\0' ? "unknown" : name;
}

const char* wsync_refusal_name(wsync_refusal refusal) {
  const char* name = msg::EnumNameErrorCode(static_cast<msg::ErrorCode>(refusal));
  return *name == '\0' ? "unknown" : name;
}

void wsync_string_free(char* text) { std::free(text); }

wsync_status wsync_log_configure(const char* program, const char* level, const char* format) {
  return capi::guarded(__func__, [&]() -> wsync_status {
    log::Options options;
    auto name = capi::optionalText(program, "program", capi::kMaxConfigTextBytes);
    if (!name) return capi::fail(WSYNC_INVALID_ARGUMENT, std::move(name.error()));
    if (*name) options.program = std::move(**name);
    if (level != nullptr) {
      auto parsed = log::parseLevel(level);
      if (!parsed) return capi::fail(WSYNC_INVALID_ARGUMENT, "level: " + parsed.error());
      options.level = *parsed;
    } else if (const char* fromEnvironment = std::getenv("WSYNC_LOG_LEVEL")) {
      options.level = log::parseLevel(fromEnvironment).value_or(options.level);  // as a process that never calls this
    }
    if (format != nullptr) {
      auto parsed = log::parseFormat(format);
      if (!parsed) return capi::fail(WSYNC_INVALID_ARGUMENT, "format: " + parsed.error());
      options.format = *parsed;
    }
    log::configure(options);
    return WSYNC_OK;
  });
}

}  // extern "C"
