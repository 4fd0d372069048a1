#include "common/env/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace gradstream {
namespace {

TEST(Crc32c, KnownVector) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("6789", Crc32c("12345")), 0xE3069283u);
}

// 8-byte steps (the SSE4.2 path's bulk) agree with 1-byte steps.
TEST(Crc32c, WordsAgreeWithBytes) {
  std::string data(4099, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  uint32_t bytewise = 0;
  for (char ch : data) bytewise = Crc32c(std::string_view(&ch, 1), bytewise);
  EXPECT_EQ(Crc32c(data), bytewise);
}

std::string Pattern(size_t n) {
  std::string data(n, '\0');
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  return data;
}

uint32_t Bytewise(std::string_view view) {
  uint32_t crc = 0;
  for (char ch : view) crc = Crc32c(std::string_view(&ch, 1), crc);
  return crc;
}

// The three-chain bulk ([crc streams]) at lengths around its block sizes
// (3 x 256 and 3 x 8192 bytes) and at every start offset mod 8 agrees with
// 1-byte steps, which never take it; and splitting anywhere agrees too.
TEST(Crc32c, StreamsAgreeWithBytes) {
  const std::string data = Pattern(3 * 8192 * 2 + 3 * 256 + 64);
  for (size_t len : {767, 768, 769, 3 * 256 + 8, 24575, 24576, 24577, 24576 + 768 + 5,
                     2 * 24576 + 3 * 256 + 57}) {
    for (size_t off = 0; off < 8; ++off) {
      const std::string_view view(data.data() + off, len);
      const uint32_t bytewise = Bytewise(view);
      EXPECT_EQ(crc32c_internal::WithoutFold(view), bytewise) << "len " << len << " offset " << off;
      const size_t cut = len / 3 + off;
      EXPECT_EQ(crc32c_internal::WithoutFold(view.substr(cut),
                                             crc32c_internal::WithoutFold(view.substr(0, cut))),
                bytewise)
          << "len " << len << " split at " << cut;
    }
  }
}

// The folded bulk ([crc fold]) agrees with 1-byte steps at lengths that end
// in each of its loops (256-byte rounds, 64-byte and 16-byte folds, 8-byte
// and 1-byte tails), at unaligned starts, from a nonzero register, and on
// all-ones data (every product term set).
TEST(Crc32c, FoldAgreesWithBytes) {
  if (!crc32c_internal::Folds()) GTEST_SKIP() << "this CPU has no VPCLMULQDQ with AVX-512";
  const std::string data = Pattern(16384 + 1024);
  for (size_t len : {256, 257, 263, 264, 271, 272, 319, 320, 336, 511, 512, 767, 768, 1000,
                     16384, 16384 + 255, 16384 + 333}) {
    for (size_t off : {0, 1, 7, 8, 63}) {
      const std::string_view view(data.data() + off, len);
      const uint32_t bytewise = Bytewise(view);
      EXPECT_EQ(Crc32c(view), bytewise) << "len " << len << " offset " << off;
      EXPECT_EQ(Crc32c(view.substr(100), Crc32c(view.substr(0, 100))), bytewise)
          << "len " << len << " offset " << off << " from a nonzero register";
    }
  }
  const std::string ones(4096 + 48, '\xff');
  EXPECT_EQ(Crc32c(ones), Bytewise(ones));
}

}  // namespace
}  // namespace gradstream
