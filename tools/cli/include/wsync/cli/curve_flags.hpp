#pragma once
// The CURVE flags of the programs that connect to a coordinator (wsync-trainer, wsync-worker, wsync-mon,
// wsync-ctl): their own key pair and the coordinator's public key, both needed on a tcp bus that requires CURVE
// (curve.hpp, docs/security.md).
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <tl/expected.hpp>

#include "wsync/bus/transport/curve.hpp"

namespace wsync::cli {

using bus::CurveClient;
using bus::readCurveKeyPair;
using bus::resolveCurvePublicKey;

class CurveClientFlags {
 public:
  void addTo(CLI::App& app) {
    app.add_option("--curve-keys", keysPath_, "tcp with CURVE: this program's key-pair file (wsync-keygen makes one)");
    app.add_option("--server-key", serverKey_, "tcp with CURVE: the coordinator's public key, or a file holding it");
  }

  // After parsing: no CURVE (neither flag), the settings, or what is wrong with them.
  tl::expected<std::optional<CurveClient>, std::string> client() const {
    if (keysPath_.empty() && serverKey_.empty()) return std::nullopt;
    if (keysPath_.empty() || serverKey_.empty()) {
      return tl::unexpected(std::string("CURVE needs both --curve-keys and --server-key"));
    }
    auto keys = readCurveKeyPair(keysPath_);
    if (!keys) return tl::unexpected("--curve-keys: " + keys.error());
    auto server = resolveCurvePublicKey(serverKey_);
    if (!server) return tl::unexpected("--server-key: " + server.error());
    return CurveClient{std::move(*keys), std::move(*server)};
  }

 private:
  std::string keysPath_;
  std::string serverKey_;
};

}  // namespace wsync::cli
