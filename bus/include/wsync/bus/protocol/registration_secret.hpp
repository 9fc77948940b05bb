#pragma once
// The secret a coordinator hands an agent in its Welcome, on the agent's own connection (docs/security.md,
// "Identity"): the one proof that a later hello for the same agent id, or a SlotReport sent on another connection,
// comes from the holder of that registration. What anyone can learn (a pid, a host key, an agent id, a slot number)
// proves nothing.
#include <array>
#include <cstdint>

#include <flatbuffers/flatbuffers.h>
#include <tl/expected.hpp>

namespace wsync::bus {

// 128 bits: beyond guessing over any number of connections a bus can take.
inline constexpr std::size_t kRegistrationSecretBytes = 16;

struct RegistrationSecret {
  std::array<std::uint8_t, kRegistrationSecretBytes> bytes{};
  bool present = false;  // false: none (an agent's first hello, or a build that sends none)

  // A new secret from the kernel's CSPRNG, or why there is none.
  static tl::expected<RegistrationSecret, std::string> generate();
  // The secret a message carries; none when the field is absent or not of the secret's size.
  static RegistrationSecret fromMessage(const flatbuffers::Vector<std::uint8_t>* field);
  // The field for a message (null offset when there is no secret).
  flatbuffers::Offset<flatbuffers::Vector<std::uint8_t>> toMessage(flatbuffers::FlatBufferBuilder& fbb) const;

  // Whether `offered` is this secret. In constant time: how far a guess matched must not show in how long the
  // coordinator takes to refuse it.
  bool matches(const RegistrationSecret& offered) const;
};

}  // namespace wsync::bus
