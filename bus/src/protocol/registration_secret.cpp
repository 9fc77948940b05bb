#include "wsync/bus/protocol/registration_secret.hpp"

#include <algorithm>

#include "wsync/bus/core/random_bytes.hpp"

namespace wsync::bus {

tl::expected<RegistrationSecret, std::string> RegistrationSecret::generate() {
  RegistrationSecret secret;
  if (auto filled = fillRandom(secret.bytes); !filled) {
    return tl::unexpected("no random bytes for a registration secret: " + filled.error());
  }
  secret.present = true;
  return secret;
}

RegistrationSecret RegistrationSecret::fromMessage(const flatbuffers::Vector<std::uint8_t>* field) {
  RegistrationSecret secret;
  if (field == nullptr || field->size() != kRegistrationSecretBytes) return secret;
  std::copy(field->begin(), field->end(), secret.bytes.begin());
  secret.present = true;
  return secret;
}

flatbuffers::Offset<flatbuffers::Vector<std::uint8_t>> RegistrationSecret::toMessage(
    flatbuffers::FlatBufferBuilder& fbb) const {
  if (!present) return 0;
  return fbb.CreateVector(bytes.data(), bytes.size());
}

bool RegistrationSecret::matches(const RegistrationSecret& offered) const {
  if (!present || !offered.present) return false;
  std::uint8_t difference = 0;
  for (std::size_t index = 0; index < bytes.size(); ++index) {
    difference = static_cast<std::uint8_t>(difference | (bytes[index] ^ offered.bytes[index]));
  }
  return difference == 0;
}

}  // namespace wsync::bus
