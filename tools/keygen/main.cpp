// wsync-keygen: makes a CURVE key pair for a tcp bus (docs/security.md) and prints its public key, for the
// coordinator's allowlist (a client's key) or the clients' --server-key (the coordinator's).
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "wsync/bus/transport/curve.hpp"

int main(int argc, char** argv) {
  std::string path;
  bool force = false;
  CLI::App app{"wsync-keygen: writes a CURVE key pair (mode 0600) and prints its public key"};
  app.add_option("file", path, "the key-pair file to write")->required();
  app.add_flag("--force", force, "replace an existing file");
  CLI11_PARSE(app, argc, argv);

  if (std::filesystem::exists(path) && !force) {
    std::fprintf(stderr, "wsync-keygen: %s exists (--force replaces it; clients holding its key lose access)\n",
                 path.c_str());
    return 1;
  }
  auto keys = wsync::bus::generateCurveKeyPair();
  if (!keys) {
    std::fprintf(stderr, "wsync-keygen: %s\n", keys.error().c_str());
    return 1;
  }
  if (auto written = wsync::bus::writeCurveKeyPair(path, *keys); !written) {
    std::fprintf(stderr, "wsync-keygen: %s\n", written.error().c_str());
    return 1;
  }
  // The one line to share: an allowlist takes it as it is.
  std::printf("public %s\n", keys->publicKey.c_str());
  return 0;
}
