#pragma once
#include <cstdint>
#include <string_view>

#include "wsync/bus/core/failure.hpp"

namespace wsync::bus {

// What is wrong with a manifest or a tensor in it; the Failure's detail names the tensor.
enum class ManifestError : std::uint8_t {
  Empty,  // no tensors
  TooManyTensors,
  InvalidName,  // empty, over kMaxTensorNameBytes, not UTF-8, or with a control byte (validateTensorName)
  DuplicateName,
  UnknownDType,
  RankTooLarge,  // more than kMaxTensorRank dimensions
  NegativeDimension,
  TooLarge,         // the byte count overflows or exceeds kMaxManifestBytes
  DigestMismatch,   // the digest sent with a manifest is not the digest of its tensors
  InvalidPlan,      // a bucket size or alignment that cannot hold the payload
  MessageTooLarge,  // encoded, over kMaxManifestMessageBytes: it could not travel in a control message
};

std::string_view toString(ManifestError error);

using ManifestFailure = Failure<ManifestError>;

}  // namespace wsync::bus
