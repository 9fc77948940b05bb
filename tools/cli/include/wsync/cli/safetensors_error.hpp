#pragma once
#include <cstdint>
#include <string_view>

#include "wsync/bus/core/failure.hpp"

namespace wsync::cli {

using bus::Failure;

// What is wrong with a safetensors file, or why one could not be written. The Failure's detail names the file and,
// where there is one, the tensor or the field.
enum class SafetensorsError : std::uint8_t {
  OpenFailed,       // the file cannot be opened, inspected or mapped
  TooShort,         // shorter than the 8-byte length prefix, or than the header that prefix announces
  HeaderTooLarge,   // the header is longer than kMaxSafetensorsHeaderBytes
  HeaderNotJson,    // the header does not parse as JSON
  HeaderNotObject,  // the header is JSON but not an object
  TooManyTensors,   // more than kMaxTensors entries
  InvalidMetadata,  // "__metadata__" is not an object of strings
  InvalidEntry,     // a tensor's entry is not an object with dtype, shape and data_offsets, or its name is unusable
  UnknownDType,
  InvalidShape,    // not a list of at most kMaxTensorRank non-negative integers, or too many bytes
  InvalidOffsets,  // data_offsets is not [begin, end] with end - begin the byte count of dtype and shape
  OutOfBounds,     // a tensor's bytes lie past the end of the data area
  Overlap,         // two tensors share bytes
  SizeMismatch,    // writing: a data span's size differs from its spec's byte count, or the counts differ
  WriteFailed,     // writing: creating, writing or renaming the file failed
};

std::string_view toString(SafetensorsError error);

using SafetensorsFailure = Failure<SafetensorsError>;

}  // namespace wsync::cli
