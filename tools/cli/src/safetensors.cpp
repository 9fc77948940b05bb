#include "wsync/cli/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "wsync/bus/protocol/dtype.hpp"

namespace wsync::cli {

using bus::dtypeFromSafetensorsName;
using bus::elementBytes;
using bus::fail;
using bus::kMaxTensorNameBytes;
using bus::kMaxTensorRank;
using bus::kMaxTensors;
using bus::safetensorsName;

namespace {

using Json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::size_t kLengthPrefixBytes = 8;
// The longest list a valid header holds: a shape of kMaxTensorRank dimensions (data_offsets has two).
constexpr std::size_t kMaxHeaderListEntries = kMaxTensorRank;

std::string tensorLabel(std::string_view name) { return "tensor '" + std::string(name) + "'"; }

// Called right after the failing call, before anything else can change errno.
std::string errnoText(const std::string& call) { return call + ": " + std::strerror(errno); }

std::string shapeText(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  return text + "]";
}

// The format is little-endian whatever the host.
std::uint64_t readLittleEndian64(const std::byte* bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | std::to_integer<std::uint64_t>(bytes[i]);
  return value;
}

std::array<std::byte, 8> littleEndian64(std::uint64_t value) {
  std::array<std::byte, 8> bytes{};
  for (std::byte& byte : bytes) {
    byte = static_cast<std::byte>(value & 0xFFU);
    value >>= 8;
  }
  return bytes;
}

// Element count x element size, or nothing when it overflows.
std::optional<std::uint64_t> byteCount(std::size_t elementSize, const std::vector<std::int64_t>& shape) {
  std::uint64_t bytes = elementSize;
  for (std::int64_t dim : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(dim), &bytes)) return std::nullopt;
  }
  return bytes;
}

struct ParsedEntry {
  TensorSpec spec;
  std::uint64_t begin = 0;  // in the data area
  std::uint64_t end = 0;
};

std::string listText(const std::vector<std::uint64_t>& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(values[i]);
  return text + "]";
}

// Reads the header as a stream of SAX events and builds the entries straight away, checking each as it completes.
// No JSON tree is built: nlohmann's trees cost ~10x the text in memory and its filtering parser is quadratic in the
// tensor count, while this is linear and stops at the first thing no valid header contains (a value nested past a
// list of numbers, a list longer than a shape, a name twice, more tensors than a manifest holds), so that a hostile
// 100 MB header costs neither gigabytes nor minutes.
class HeaderReader {
 public:
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  explicit HeaderReader(std::uint64_t dataBytes) : dataBytes_(dataBytes) {}

  // The first problem found; the parse stops there.
  const std::optional<SafetensorsFailure>& failure() const { return failure_; }
  std::vector<ParsedEntry>& entries() { return entries_; }
  std::map<std::string, std::string>& metadata() { return metadata_; }

  // nlohmann's SAX interface. Depth counts the containers open around the event.
  bool null() { return scalar("null", "null"); }
  bool boolean(bool value) { return scalar("boolean", value ? "true" : "false"); }
  bool number_integer(Json::number_integer_t value) { return scalar("number", std::to_string(value)); }
  bool number_unsigned(Json::number_unsigned_t value) {
    if (depth_ == 3 && !inMetadata_) return listEntry(value);
    return scalar("number", std::to_string(value));
  }
  bool number_float(Json::number_float_t /*value*/, const string_t& text) { return scalar("number", text); }
  bool string(string_t& value) {
    if (depth_ == 2 && inMetadata_) {
      metadata_.insert_or_assign(field_, std::move(value));
      return true;
    }
    if (depth_ == 2 && field_ == "dtype") {
      const auto maybeDType = dtypeFromSafetensorsName(value);
      if (!maybeDType) {
        return refuse(SafetensorsError::UnknownDType, tensorLabel(name_) + " has dtype \"" + value +
                                                          "\", not one of BOOL U8 I8 I16 I32 I64 U16 U32 U64 F16 "
                                                          "BF16 F32 F64 F8_E4M3 F8_E5M2");
      }
      current_.spec.dtype = *maybeDType;
      return true;
    }
    return scalar("string", "\"" + value + "\"");
  }
  bool binary(binary_t& /*value*/) { return scalar("binary", "binary"); }  // only CBOR and the like have these

  bool start_object(std::size_t /*elements*/) {
    switch (depth_++) {
      case 0:
        return true;  // the header
      case 1:
        if (name_ == kMetadataKey) {
          inMetadata_ = true;
        } else {
          current_ = ParsedEntry{};
          current_.spec.name = name_;
          offsets_.clear();
          seenFields_ = 0;
        }
        return true;
      default:
        return container("an object");
    }
  }
  bool start_array(std::size_t /*elements*/) {
    switch (depth_++) {
      case 0:
        return refuse(SafetensorsError::HeaderNotObject, "the header is a JSON array, not an object");
      case 1:
        return wrongType("an array");
      case 2:
        if (!inMetadata_ && (field_ == "shape" || field_ == "data_offsets")) {
          list_.clear();
          return true;
        }
        return container("an array");
      default:
        return container("an array");
    }
  }
  bool key(string_t& key) {
    if (depth_ == 1) {
      name_ = std::move(key);
      if (!names_.insert(name_).second) {
        return refuse(SafetensorsError::InvalidEntry, label() + " appears twice in the header");
      }
      if (name_ != kMetadataKey && entries_.size() >= kMaxTensors) {
        return refuse(SafetensorsError::TooManyTensors,
                      label() + " is one past the " + std::to_string(kMaxTensors) + " tensors a manifest holds");
      }
      if (name_.empty() || name_.size() > kMaxTensorNameBytes) {
        return refuse(SafetensorsError::InvalidEntry,
                      name_.empty() ? std::string("a tensor has an empty name")
                                    : tensorLabel(name_.substr(0, 64) + "...") + " has a name over " +
                                          std::to_string(kMaxTensorNameBytes) + " bytes");
      }
    } else if (depth_ == 2) {
      field_ = std::move(key);
      const unsigned bit = inMetadata_ ? 0U : fieldBit(field_);
      if ((seenFields_ & bit) != 0) {
        return refuse(SafetensorsError::InvalidEntry, label() + " has the field '" + field_ + "' twice");
      }
      seenFields_ |= bit;
    }
    return true;
  }
  bool end_array() {
    if (--depth_ == 2) {
      if (field_ == "shape") {
        current_.spec.shape.assign(list_.begin(), list_.end());  // each checked to fit int64 in listEntry
      } else {
        offsets_ = list_;
      }
    }
    return true;
  }
  bool end_object() {
    if (--depth_ != 1) return true;
    if (inMetadata_) {
      inMetadata_ = false;
      return true;
    }
    return finishEntry();
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/, const Json::exception& error) {
    return refuse(SafetensorsError::HeaderNotJson, error.what());
  }

 private:
  // The three fields an entry must have, as bits; 0 for others, which are ignored.
  static unsigned fieldBit(std::string_view field) {
    if (field == "dtype") return 1U;
    if (field == "shape") return 2U;
    if (field == "data_offsets") return 4U;
    return 0U;
  }

  std::string label() const { return name_ == kMetadataKey ? std::string("'__metadata__'") : tensorLabel(name_); }

  // The error for something wrong inside the current field.
  SafetensorsError fieldError() const {
    if (inMetadata_) return SafetensorsError::InvalidMetadata;
    if (field_ == "dtype") return SafetensorsError::UnknownDType;
    if (field_ == "shape") return SafetensorsError::InvalidShape;
    if (field_ == "data_offsets") return SafetensorsError::InvalidOffsets;
    return SafetensorsError::InvalidEntry;
  }

  // A value where the header, an entry or a metadata value was expected to be an object or a string.
  bool wrongType(const std::string& what) {
    if (name_ == kMetadataKey) {
      return refuse(SafetensorsError::InvalidMetadata, "'__metadata__' is " + what + ", not an object of strings");
    }
    return refuse(SafetensorsError::InvalidEntry, label() + " is described by " + what + ", not an object");
  }

  // A container inside a field, or inside a list: no valid header has one.
  bool container(const std::string& what) {
    if (inMetadata_) {
      return refuse(SafetensorsError::InvalidMetadata,
                    "'__metadata__' key '" + field_ + "' has " + what + " as its value, not a string");
    }
    return refuse(fieldError(), label() + " field '" + field_ + "' holds " + what + " where no header has one");
  }

  bool scalar(const char* type, const std::string& text) {
    switch (depth_) {
      case 0:
        return refuse(SafetensorsError::HeaderNotObject,
                      "the header is a JSON " + std::string(type) + ", not an object");
      case 1:
        return wrongType("a JSON " + std::string(type) + " (" + text.substr(0, 64) + ")");
      case 2:
        if (inMetadata_) {
          return refuse(SafetensorsError::InvalidMetadata,
                        "'__metadata__' key '" + field_ + "' has the value " + text.substr(0, 64) + ", not a string");
        }
        if (field_ == "dtype" || field_ == "shape" || field_ == "data_offsets") {
          return refuse(fieldError(), label() + " has " + field_ + " " + text.substr(0, 64) +
                                          (field_ == "dtype" ? ", not a name" : ", not a list"));
        }
        return true;  // a field the format does not define: ignored, as the reference reader does
      default:
        return refuse(fieldError(),
                      label() + " has " + field_ + " entry " + text.substr(0, 64) + ", not a non-negative integer");
    }
  }

  bool listEntry(std::uint64_t value) {
    if (list_.size() == kMaxHeaderListEntries) {
      return refuse(fieldError(),
                    label() + " has " + field_ + " of over " + std::to_string(kMaxHeaderListEntries) + " entries");
    }
    if (field_ == "shape" && value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return refuse(SafetensorsError::InvalidShape,
                    label() + " has shape entry " + std::to_string(value) + ", past the 64-bit signed range");
    }
    list_.push_back(value);
    return true;
  }

  bool finishEntry() {
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if ((seenFields_ & fieldBit(field)) == 0) {
        return refuse(SafetensorsError::InvalidEntry, label() + " has no '" + field + "'");
      }
    }
    const TensorSpec& spec = current_.spec;
    const auto maybeBytes = byteCount(elementBytes(spec.dtype), spec.shape);
    if (!maybeBytes) {
      return refuse(SafetensorsError::InvalidShape,
                    label() + " of shape " + shapeText(spec.shape) + " has more bytes than 64 bits can count");
    }
    const std::vector<std::uint64_t>& offsets = offsets_;
    if (offsets.size() != 2 || offsets[0] > offsets[1]) {
      return refuse(SafetensorsError::InvalidOffsets,
                    label() + " has data_offsets " + listText(offsets) + ", not [begin, end] with begin <= end");
    }
    current_.begin = offsets[0];
    current_.end = offsets[1];
    if (current_.end - current_.begin != *maybeBytes) {
      return refuse(SafetensorsError::InvalidOffsets, label() + " has data_offsets " + listText(offsets) + " (" +
                                                          std::to_string(current_.end - current_.begin) +
                                                          " bytes), but " + std::string(safetensorsName(spec.dtype)) +
                                                          " " + shapeText(spec.shape) + " is " +
                                                          std::to_string(*maybeBytes) + " bytes");
    }
    if (current_.end > dataBytes_) {
      return refuse(SafetensorsError::OutOfBounds, label() + " has data_offsets " + listText(offsets) +
                                                       ", past the end of the data area of " +
                                                       std::to_string(dataBytes_) + " bytes");
    }
    entries_.push_back(std::move(current_));
    return true;
  }

  bool refuse(SafetensorsError code, std::string detail) {
    if (!failure_) failure_ = SafetensorsFailure{code, std::move(detail)};
    return false;
  }

  std::uint64_t dataBytes_;
  int depth_ = 0;
  bool inMetadata_ = false;
  std::string name_;   // the current key of the header: a tensor's name or "__metadata__"
  std::string field_;  // the current key inside an entry or the metadata
  ParsedEntry current_;
  std::vector<std::uint64_t> offsets_;  // of the current entry
  std::vector<std::uint64_t> list_;     // the shape or data_offsets being read
  std::unordered_set<std::string> names_;
  unsigned seenFields_ = 0;  // fieldBit()s of the current entry
  std::vector<ParsedEntry> entries_;
  std::map<std::string, std::string> metadata_;
  std::optional<SafetensorsFailure> failure_;
};

// Writes all of `bytes`, across partial writes and signals.
bool writeAll(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes = bytes.subspan(static_cast<std::size_t>(written));
  }
  return true;
}

}  // namespace

std::string_view toString(SafetensorsError error) {
  switch (error) {
    case SafetensorsError::OpenFailed:
      return "cannot open safetensors file";
    case SafetensorsError::TooShort:
      return "safetensors file too short";
    case SafetensorsError::HeaderTooLarge:
      return "safetensors header too large";
    case SafetensorsError::HeaderNotJson:
      return "safetensors header is not JSON";
    case SafetensorsError::HeaderNotObject:
      return "safetensors header is not a JSON object";
    case SafetensorsError::TooManyTensors:
      return "too many tensors";
    case SafetensorsError::InvalidMetadata:
      return "invalid safetensors metadata";
    case SafetensorsError::InvalidEntry:
      return "invalid tensor entry";
    case SafetensorsError::UnknownDType:
      return "unknown dtype";
    case SafetensorsError::InvalidShape:
      return "invalid shape";
    case SafetensorsError::InvalidOffsets:
      return "invalid data offsets";
    case SafetensorsError::OutOfBounds:
      return "tensor outside the data area";
    case SafetensorsError::Overlap:
      return "overlapping tensors";
    case SafetensorsError::SizeMismatch:
      return "tensor data size mismatch";
    case SafetensorsError::WriteFailed:
      return "cannot write safetensors file";
  }
  return "unknown safetensors error";
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : mapped_(std::exchange(other.mapped_, nullptr)),
      mappedBytes_(std::exchange(other.mappedBytes_, 0)),
      tensors_(std::move(other.tensors_)),
      ranges_(std::move(other.ranges_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    mapped_ = std::exchange(other.mapped_, nullptr);
    mappedBytes_ = std::exchange(other.mappedBytes_, 0);
    tensors_ = std::move(other.tensors_);
    ranges_ = std::move(other.ranges_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() {
  if (mapped_ != nullptr) ::munmap(const_cast<std::byte*>(mapped_), mappedBytes_);
  mapped_ = nullptr;
  mappedBytes_ = 0;
}

std::span<const std::byte> SafetensorsFile::bytes(std::size_t index) const {
  const Range& range = ranges_[index];
  return {mapped_ + range.begin, static_cast<std::size_t>(range.size)};
}

tl::expected<SafetensorsFile, SafetensorsFailure> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string where = path.string() + ": ";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(SafetensorsError::OpenFailed, where + errnoText("open"));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const std::string text = errnoText("fstat");
    ::close(fd);
    return fail(SafetensorsError::OpenFailed, where + text);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return fail(SafetensorsError::OpenFailed, where + "not a regular file");
  }
  const auto fileBytes = static_cast<std::uint64_t>(info.st_size);
  if (fileBytes < kLengthPrefixBytes) {
    ::close(fd);
    return fail(SafetensorsError::TooShort, where + std::to_string(fileBytes) +
                                                " bytes, shorter than the 8-byte header length that starts the format");
  }
  void* mapped = ::mmap(nullptr, fileBytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string mapError = mapped == MAP_FAILED ? errnoText("mmap") : std::string();
  ::close(fd);  // the mapping keeps the file open
  if (mapped == MAP_FAILED) return fail(SafetensorsError::OpenFailed, where + mapError);
  SafetensorsFile file(static_cast<const std::byte*>(mapped), fileBytes);  // unmaps on every return below

  const std::uint64_t headerBytes = readLittleEndian64(file.mapped_);
  if (headerBytes > kMaxSafetensorsHeaderBytes) {
    return fail(SafetensorsError::HeaderTooLarge, where + "the header claims " + std::to_string(headerBytes) +
                                                      " bytes, over the bound of " +
                                                      std::to_string(kMaxSafetensorsHeaderBytes));
  }
  if (headerBytes > fileBytes - kLengthPrefixBytes) {
    return fail(SafetensorsError::TooShort, where + "the header claims " + std::to_string(headerBytes) +
                                                " bytes, but the file has only " +
                                                std::to_string(fileBytes - kLengthPrefixBytes) + " after its length");
  }
  const auto* headerText = reinterpret_cast<const char*>(file.mapped_ + kLengthPrefixBytes);
  const std::uint64_t dataStart = kLengthPrefixBytes + headerBytes;
  const std::uint64_t dataBytes = fileBytes - dataStart;

  HeaderReader reader(dataBytes);
  Json::sax_parse(headerText, headerText + headerBytes, &reader);
  if (reader.failure()) return fail(reader.failure()->code, where + reader.failure()->detail);
  file.metadata_ = std::move(reader.metadata());
  std::vector<ParsedEntry>& entries = reader.entries();

  // File order; stable, so that zero-byte tensors sharing an offset keep their header order.
  std::vector<std::size_t> order(entries.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::pair(entries[a].begin, entries[a].end) < std::pair(entries[b].begin, entries[b].end);
  });
  const ParsedEntry* furthest = nullptr;  // the tensor reaching furthest so far: the only one a later one can overlap
  for (std::size_t index : order) {
    const ParsedEntry& entry = entries[index];
    if (entry.begin == entry.end) continue;  // no bytes, nothing to share
    if (furthest != nullptr && entry.begin < furthest->end) {
      return fail(SafetensorsError::Overlap,
                  where + tensorLabel(furthest->spec.name) + " [" + std::to_string(furthest->begin) + ", " +
                      std::to_string(furthest->end) + ") and " + tensorLabel(entry.spec.name) + " [" +
                      std::to_string(entry.begin) + ", " + std::to_string(entry.end) + ") share bytes");
    }
    if (furthest == nullptr || entry.end > furthest->end) furthest = &entry;
  }

  file.tensors_.reserve(entries.size());
  file.ranges_.reserve(entries.size());
  for (std::size_t index : order) {
    ParsedEntry& entry = entries[index];
    file.ranges_.push_back(Range{dataStart + entry.begin, entry.end - entry.begin});
    file.tensors_.push_back(std::move(entry.spec));
  }
  return file;
}

tl::expected<void, SafetensorsFailure> writeSafetensors(const std::filesystem::path& path,
                                                        std::span<const TensorSpec> tensors,
                                                        std::span<const std::span<const std::byte>> data,
                                                        const std::map<std::string, std::string>& metadata) {
  if (tensors.size() != data.size()) {
    return fail(SafetensorsError::SizeMismatch, path.string() + ": " + std::to_string(tensors.size()) +
                                                    " tensors but " + std::to_string(data.size()) + " data spans");
  }
  if (tensors.size() > kMaxTensors) {
    return fail(SafetensorsError::TooManyTensors, path.string() + ": " + std::to_string(tensors.size()) +
                                                      " tensors, at most " + std::to_string(kMaxTensors));
  }

  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  std::uint64_t dataBytes = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& tensor = tensors[i];
    if (tensor.name.empty() || tensor.name.size() > kMaxTensorNameBytes || tensor.name == kMetadataKey ||
        !names.insert(tensor.name).second) {
      return fail(SafetensorsError::InvalidEntry, tensorLabel(tensor.name.substr(0, 64)) + " (number " +
                                                      std::to_string(i) +
                                                      ") has an empty, reserved, duplicate or over-long name");
    }
    const std::size_t element = elementBytes(tensor.dtype);
    if (element == 0) {
      return fail(SafetensorsError::UnknownDType, tensorLabel(tensor.name) + " has dtype " +
                                                      std::to_string(static_cast<int>(tensor.dtype)) +
                                                      ", which this build does not know");
    }
    if (tensor.shape.size() > kMaxTensorRank ||
        std::any_of(tensor.shape.begin(), tensor.shape.end(), [](std::int64_t dim) { return dim < 0; })) {
      return fail(SafetensorsError::InvalidShape, tensorLabel(tensor.name) + " has shape " + shapeText(tensor.shape));
    }
    const auto maybeBytes = byteCount(element, tensor.shape);
    if (!maybeBytes || __builtin_add_overflow(dataBytes, *maybeBytes, &dataBytes)) {
      return fail(SafetensorsError::InvalidShape, tensorLabel(tensor.name) + " of shape " + shapeText(tensor.shape) +
                                                      " takes the file past 64 bits of bytes");
    }
    if (data[i].size() != *maybeBytes) {
      return fail(SafetensorsError::SizeMismatch, tensorLabel(tensor.name) + " is " +
                                                      std::string(safetensorsName(tensor.dtype)) + " " +
                                                      shapeText(tensor.shape) + ", " + std::to_string(*maybeBytes) +
                                                      " bytes, but its data has " + std::to_string(data[i].size()));
    }
  }
  // Built as text, one entry at a time in the given order: an order-keeping JSON object would search its keys
  // linearly on every insert. Each piece is dumped by nlohmann, which escapes and checks UTF-8.
  std::string headerText = "{";
  const auto append = [&headerText](const std::string& key, const nlohmann::ordered_json& value) {
    if (headerText.size() > 1) headerText += ',';
    headerText += nlohmann::json(key).dump();
    headerText += ':';
    headerText += value.dump();
  };
  try {
    if (!metadata.empty()) append(std::string(kMetadataKey), metadata);
    for (std::size_t i = 0, offset = 0; i < tensors.size(); ++i) {
      const TensorSpec& tensor = tensors[i];
      nlohmann::ordered_json entry;  // the field order of the reference writer
      entry["dtype"] = std::string(safetensorsName(tensor.dtype));
      entry["shape"] = tensor.shape;
      entry["data_offsets"] = {offset, offset + data[i].size()};
      append(tensor.name, entry);
      offset += data[i].size();
    }
  } catch (const Json::exception& error) {  // dump() throws rather than write a string that is not UTF-8
    return fail(SafetensorsError::InvalidEntry, path.string() + ": a tensor name or metadata entry: " + error.what());
  }
  headerText += '}';
  // Padding keeps the data area 8-byte aligned in the file, so a mapping of it is aligned for every dtype.
  headerText.append((8 - headerText.size() % 8) % 8, ' ');
  if (headerText.size() > kMaxSafetensorsHeaderBytes) {
    return fail(SafetensorsError::HeaderTooLarge, path.string() + ": the header would take " +
                                                      std::to_string(headerText.size()) + " bytes, over the bound of " +
                                                      std::to_string(kMaxSafetensorsHeaderBytes));
  }

  const std::string temporary = path.string() + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(SafetensorsError::WriteFailed, temporary + ": " + errnoText("open"));
  const auto abandon = [&](const std::string& reason) {
    ::unlink(temporary.c_str());
    return fail(SafetensorsError::WriteFailed, temporary + ": " + reason);
  };

  const auto prefix = littleEndian64(headerText.size());
  bool written = writeAll(fd, prefix) && writeAll(fd, std::as_bytes(std::span(headerText)));
  for (std::size_t i = 0; written && i < data.size(); ++i) written = writeAll(fd, data[i]);
  if (!written) {
    const std::string reason = errnoText("write");
    ::close(fd);
    return abandon(reason);
  }
  if (::close(fd) != 0) return abandon(errnoText("close"));
  if (::rename(temporary.c_str(), path.c_str()) != 0) return abandon(errnoText("rename to " + path.string()));
  return {};
}

}  // namespace wsync::cli
