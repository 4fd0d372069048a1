// Unit tests of the token and config helpers. TLS handshakes, refusals with
// the right codes and an mTLS job end to end are in tests/security/.
#include "common/rpc/rpc.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "common/grpc_util.h"
#include "gtest/gtest.h"

namespace gradstream::rpc {
namespace {

std::string WriteTemp(const std::string& name, const std::string& content) {
  const std::string path = "/tmp/rpc_test." + std::to_string(::getpid()) + "." + name;
  std::ofstream(path) << content;
  return path;
}

TEST(Token, CheckTokenSaysWhatIsMissingWithoutEchoingTokens) {
  EXPECT_TRUE(CheckToken("", "", "x").ok());        // nothing configured: open
  EXPECT_TRUE(CheckToken("", "junk", "x").ok());
  EXPECT_TRUE(CheckToken("s3cret", "s3cret", "x").ok());
  absl::Status none = CheckToken("s3cret", "", "job j");
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(none.message().find("job j needs credentials"), std::string::npos) << none;
  absl::Status wrong = CheckToken("s3cret", "guess1", "job j");
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.message().find("guess1"), std::string::npos);
  EXPECT_EQ(wrong.message().find("s3cret"), std::string::npos);
}

TEST(Token, TokensEqualComparesWholeStrings) {
  EXPECT_TRUE(TokensEqual("abc", "abc"));
  EXPECT_FALSE(TokensEqual("abc", "abd"));
  EXPECT_FALSE(TokensEqual("abc", "ab"));
  EXPECT_FALSE(TokensEqual("", "a"));
}

TEST(Token, NewTokensAreHexAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string t = NewToken();
    ASSERT_EQ(t.size(), 32u);
    EXPECT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(Token, TokenFileIsTrimmedAndMustNotBeEmpty) {
  const std::string good = WriteTemp("good", "  abc123\n");
  auto t = ReadTokenFile(good);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "abc123");
  const std::string empty = WriteTemp("empty", "\n");
  EXPECT_EQ(ReadTokenFile(empty).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile("/nonexistent/token").status().code(), absl::StatusCode::kNotFound);
  std::remove(good.c_str());
  std::remove(empty.c_str());
}

TEST(Config, InsecureByDefault) {
  RpcSettings s;
  auto c = BuildConfig(s);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->tls.enabled());
  EXPECT_EQ(c->channel_credentials, nullptr);
  EXPECT_EQ(c->server_credentials, nullptr);
  EXPECT_TRUE(c->auth_token.empty());
}

TEST(Config, BadTlsFilesFailAtStartWithThePath) {
  RpcSettings s;
  s.tls_cert = "/nonexistent/cert.pem";
  auto c = BuildConfig(s);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("go together"), std::string::npos) << c.status();
  s.tls_key = "/nonexistent/key.pem";
  c = BuildConfig(s);
  EXPECT_NE(c.status().message().find("/nonexistent/cert.pem"), std::string::npos) << c.status();
  const std::string not_pem = WriteTemp("notpem", "hello");
  s = RpcSettings();
  s.tls_ca = not_pem;
  c = BuildConfig(s);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("not a PEM file"), std::string::npos) << c.status();
  std::remove(not_pem.c_str());
}

TEST(Config, EnvironmentFillsWhatFlagsLeaveEmpty) {
  const std::string token = WriteTemp("envtoken", "fromenv\n");
  ::setenv("GRADSTREAM_AUTH_TOKEN_FILE", token.c_str(), 1);
  auto c = BuildConfig(RpcSettings());
  ::unsetenv("GRADSTREAM_AUTH_TOKEN_FILE");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->auth_token, "fromenv");
  std::remove(token.c_str());
}

TEST(Config, KeepaliveMustBePositive) {
  RpcSettings s;
  s.keepalive_time = absl::ZeroDuration();
  EXPECT_EQ(BuildConfig(s).status().code(), absl::StatusCode::kInvalidArgument);
}

struct WireStatus {  // the shape of Ack, PullAnswer and StreamError
  int32_t code = 0;
  std::string message;
  void set_code(int32_t c) { code = c; }
  void set_message(std::string m) { message = std::move(m); }
};

TEST(WireStatus, RoundTripsEveryCanonicalCode) {
  for (int c = 0; c <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++c) {
    const absl::Status s(static_cast<absl::StatusCode>(c), c ? "why" : "");
    WireStatus w;
    StatusToWire(s, &w);
    EXPECT_EQ(StatusFromWire(w.code, w.message), s);
  }
}

TEST(WireStatus, ACodeNoStatusNamesIsUnknown) {
  EXPECT_EQ(StatusFromWire(1000, "odd").code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(StatusFromWire(-3, "odd").code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(StatusFromWire(-3, "odd").message(), "odd");
}

}  // namespace
}  // namespace gradstream::rpc
