#pragma once
// CURVE encryption and authentication for tcp endpoints (docs/security.md). A coordinator on tcp holds a key pair
// and admits only the client keys on its allowlist (checked by a ZAP handler, zap_authenticator.hpp); every client
// (agents, wsync-mon, wsync-ctl) holds its own key pair and the coordinator's public key. ipc endpoints need none
// of this: their socket files live in a folder only the owning user can enter.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <tl/expected.hpp>
#include <zmq.hpp>

namespace wsync::bus {

// A 32-byte Curve25519 key as Z85 text.
inline constexpr std::size_t kCurveKeyChars = 40;

struct CurveKeyPair {
  std::string publicKey;  // Z85
  std::string secretKey;  // Z85
};

// The client's side of a CURVE connection.
struct CurveClient {
  CurveKeyPair keys;
  std::string serverPublicKey;  // Z85: the coordinator's
};

tl::expected<CurveKeyPair, std::string> generateCurveKeyPair();

// Key-pair files hold two lines, "public KEY" and "secret KEY", and are written 0600; reading refuses one that
// other users can read (its secret would be theirs) or that holds malformed keys.
tl::expected<void, std::string> writeCurveKeyPair(const std::filesystem::path& path, const CurveKeyPair& keys);
tl::expected<CurveKeyPair, std::string> readCurveKeyPair(const std::filesystem::path& path);
// An allowlist: one public key per line, alone or as "public KEY" (so a key-pair file's line can be pasted),
// with blank lines and comment lines starting with '#' ('#' is also a Z85 digit, so not after a key); a secret line
// is refused, since an allowlist is shared.
tl::expected<std::vector<std::string>, std::string> readCurveAllowlist(const std::filesystem::path& path);
// A public key given on a command line: its Z85 text, or the path of a file whose "public" line holds it.
tl::expected<std::string, std::string> resolveCurvePublicKey(std::string_view keyOrPath);

bool isCurveKey(std::string_view text);

// Before bind: the socket is a CURVE server with `keys`; the context's ZAP handler decides who gets in.
void applyCurveServer(zmq::socket_t& socket, const CurveKeyPair& keys);
// Before connect: the socket is a CURVE client that only talks to a server with `curve.serverPublicKey`.
void applyCurveClient(zmq::socket_t& socket, const CurveClient& curve);

}  // namespace wsync::bus
