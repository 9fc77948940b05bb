#include "wsync/bus/transport/curve.hpp"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace wsync::bus {

namespace {

// The ZAP domain of every wsync socket: libzmq only consults the ZAP handler for a socket with a domain set.
constexpr const char* kZapDomain = "wsync";

std::string trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return std::string(text.substr(first, last - first + 1));
}

}  // namespace

bool isCurveKey(std::string_view text) {
  if (text.size() != kCurveKeyChars) return false;
  std::uint8_t decoded[32];
  const std::string copy(text);
  return zmq_z85_decode(decoded, copy.c_str()) != nullptr;
}

tl::expected<CurveKeyPair, std::string> generateCurveKeyPair() {
  char publicKey[kCurveKeyChars + 1];
  char secretKey[kCurveKeyChars + 1];
  if (zmq_curve_keypair(publicKey, secretKey) != 0) {
    return tl::unexpected(std::string("cannot make a CURVE key pair: ") + zmq_strerror(zmq_errno()) +
                          " (libzmq built without CURVE?)");
  }
  return CurveKeyPair{publicKey, secretKey};
}

tl::expected<void, std::string> writeCurveKeyPair(const std::filesystem::path& path, const CurveKeyPair& keys) {
  const std::filesystem::path temporary = path.string() + ".tmp";
  {
    // Created 0600 before a byte of the secret is in it.
    std::ofstream create(temporary, std::ios::trunc);
    if (!create) return tl::unexpected("cannot write " + temporary.string());
  }
  std::filesystem::permissions(temporary, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace);
  std::ofstream out(temporary, std::ios::trunc);
  out << "# wsync CURVE key pair: keep the secret line to yourself; share the public one\n"
      << "public " << keys.publicKey << "\nsecret " << keys.secretKey << "\n";
  out.close();
  if (!out) return tl::unexpected("cannot write " + temporary.string());
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) return tl::unexpected("cannot write " + path.string() + ": " + error.message());
  return {};
}

tl::expected<CurveKeyPair, std::string> readCurveKeyPair(const std::filesystem::path& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) return tl::unexpected("no key file " + path.string());
  if ((status.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return tl::unexpected(path.string() + " holds a secret key and other users can read it (chmod 600 it)");
  }
  std::ifstream in(path);
  CurveKeyPair keys;
  for (std::string line; std::getline(in, line);) {
    line = trimmed(line);
    if (line.starts_with("public ")) keys.publicKey = trimmed(std::string_view(line).substr(7));
    if (line.starts_with("secret ")) keys.secretKey = trimmed(std::string_view(line).substr(7));
  }
  if (!isCurveKey(keys.publicKey) || !isCurveKey(keys.secretKey)) {
    return tl::unexpected(path.string() +
                          " is not a key-pair file (lines 'public KEY' and 'secret KEY', 40-character "
                          "Z85 keys; wsync-keygen makes one)");
  }
  return keys;
}

tl::expected<std::vector<std::string>, std::string> readCurveAllowlist(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return tl::unexpected("no allowlist " + path.string());
  std::vector<std::string> keys;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    line = trimmed(line);
    // Comments are whole lines: '#' is also a Z85 digit.
    if (line.empty() || line.starts_with('#')) continue;
    if (line.starts_with("secret")) {
      return tl::unexpected(path.string() + ":" + std::to_string(number) +
                            ": a secret key; an allowlist holds public keys only");
    }
    if (line.starts_with("public ")) line = trimmed(std::string_view(line).substr(7));
    if (!isCurveKey(line)) {
      return tl::unexpected(path.string() + ":" + std::to_string(number) + ": not a 40-character Z85 public key");
    }
    keys.push_back(line);
  }
  if (keys.empty()) return tl::unexpected(path.string() + " allows no key");
  return keys;
}

tl::expected<std::string, std::string> resolveCurvePublicKey(std::string_view keyOrPath) {
  if (isCurveKey(keyOrPath)) return std::string(keyOrPath);
  std::ifstream in{std::string(keyOrPath)};
  if (!in) return tl::unexpected("'" + std::string(keyOrPath) + "' is neither a Z85 public key nor a readable file");
  for (std::string line; std::getline(in, line);) {
    line = trimmed(line);
    if (line.starts_with("public ")) line = trimmed(std::string_view(line).substr(7));
    if (isCurveKey(line)) return line;
  }
  return tl::unexpected(std::string(keyOrPath) + " holds no public key");
}

void applyCurveServer(zmq::socket_t& socket, const CurveKeyPair& keys) {
  socket.set(zmq::sockopt::zap_domain, kZapDomain);
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, keys.secretKey);
}

void applyCurveClient(zmq::socket_t& socket, const CurveClient& curve) {
  socket.set(zmq::sockopt::curve_serverkey, curve.serverPublicKey);
  socket.set(zmq::sockopt::curve_publickey, curve.keys.publicKey);
  socket.set(zmq::sockopt::curve_secretkey, curve.keys.secretKey);
}

}  // namespace wsync::bus
