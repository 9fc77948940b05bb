#include "wsync/bus/protocol/stream_digest.hpp"

#include <new>

#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
// libxxhash as Debian builds it runs XXH3 on SSE2; the *_dispatch entry points the same library exports pick AVX2 or
// AVX-512 at run time, which hash several times faster on hosts that have them. The header maps the plain names onto
// them.
#include <xxh_x86dispatch.h>
#endif

namespace wsync::bus {

StreamDigest::StreamDigest() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_128bits_reset(state_);
}

StreamDigest::~StreamDigest() { XXH3_freeState(state_); }

void StreamDigest::add(const void* data, std::uint64_t bytes) {
  XXH3_128bits_update(state_, data, bytes);
  total_ += bytes;
}

Digest StreamDigest::digest() const {
  const XXH128_hash_t hash = XXH3_128bits_digest(state_);
  return Digest{hash.low64, hash.high64};
}

}  // namespace wsync::bus
