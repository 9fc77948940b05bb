#pragma once
// Errors as values: every fallible bus call returns tl::expected<T, Failure<Code>>, with one Code enum per
// module (TransportError, ControlBlockError). The detail names the thing that failed (a path, a pid, a peer).
#include <string>
#include <string_view>
#include <utility>

#include <tl/expected.hpp>

namespace wsync::bus {

template <typename Code>
struct Failure {
  Code code;
  std::string detail;

  // "<code>: <detail>", with toString(Code) found by argument-dependent lookup.
  std::string describe() const {
    std::string text{toString(code)};
    if (!detail.empty()) {
      text += ": ";
      text += detail;
    }
    return text;
  }
};

template <typename Code>
tl::unexpected<Failure<Code>> fail(Code code, std::string detail = {}) {
  return tl::unexpected<Failure<Code>>(Failure<Code>{code, std::move(detail)});
}

}  // namespace wsync::bus
