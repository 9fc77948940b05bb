// CURVE key files (bus/curve.hpp): key pairs round-trip and are private to their user, allowlists take public
// keys in either form and refuse anything else by line, and a public key is found in text or in a file.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "test_environment.hpp"
#include "wsync/bus/transport/curve.hpp"

namespace wsync::bus {
namespace {

class CurveKeys : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() / test::uniqueBusName("curve");
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::filesystem::path path(const std::string& name) const { return directory_ / name; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }

  std::filesystem::path directory_;
};

TEST_F(CurveKeys, AKeyPairRoundTripsThroughAPrivateFile) {
  const auto keys = generateCurveKeyPair();
  ASSERT_TRUE(keys) << keys.error();
  EXPECT_TRUE(isCurveKey(keys->publicKey));
  EXPECT_NE(keys->publicKey, keys->secretKey);
  ASSERT_TRUE(writeCurveKeyPair(path("k"), *keys));
  struct stat status {};
  ASSERT_EQ(::stat(path("k").c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0600U);
  const auto read = readCurveKeyPair(path("k"));
  ASSERT_TRUE(read) << read.error();
  EXPECT_EQ(read->publicKey, keys->publicKey);
  EXPECT_EQ(read->secretKey, keys->secretKey);

  std::filesystem::permissions(path("k"), std::filesystem::perms::others_read, std::filesystem::perm_options::add);
  ASSERT_FALSE(readCurveKeyPair(path("k")));
  EXPECT_NE(readCurveKeyPair(path("k")).error().find("other users can read it"), std::string::npos);
  EXPECT_FALSE(readCurveKeyPair(path("missing")));
}

TEST_F(CurveKeys, AllowlistsTakePublicKeysAndNameWhatIsWrong) {
  const auto a = *generateCurveKeyPair();
  const auto b = *generateCurveKeyPair();
  write("allow", "# clients\n\npublic " + a.publicKey + "\n  " + b.publicKey + "  \n");
  const auto allowed = readCurveAllowlist(path("allow"));
  ASSERT_TRUE(allowed) << allowed.error();
  EXPECT_EQ(*allowed, (std::vector<std::string>{a.publicKey, b.publicKey}));

  write("secret", "public " + a.publicKey + "\nsecret " + a.secretKey + "\n");
  EXPECT_NE(readCurveAllowlist(path("secret")).error().find(":2: a secret key"), std::string::npos);
  write("garbage", a.publicKey + "\nnot-a-key\n");
  EXPECT_NE(readCurveAllowlist(path("garbage")).error().find(":2: not a 40-character Z85 public key"),
            std::string::npos);
  write("empty", "# nobody\n");
  EXPECT_NE(readCurveAllowlist(path("empty")).error().find("allows no key"), std::string::npos);
}

TEST_F(CurveKeys, APublicKeyComesAsTextOrFromAFile) {
  const auto keys = *generateCurveKeyPair();
  EXPECT_EQ(resolveCurvePublicKey(keys.publicKey).value(), keys.publicKey);
  write("server.pub", "public " + keys.publicKey + "\n");
  EXPECT_EQ(resolveCurvePublicKey(path("server.pub").string()).value(), keys.publicKey);
  EXPECT_FALSE(resolveCurvePublicKey("nonsense"));
  EXPECT_FALSE(isCurveKey(keys.publicKey.substr(1)));
}

}  // namespace
}  // namespace wsync::bus
