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

// The three-chain bulk ([crc streams]) at lengths around its block sizes
// (3 x 256 and 3 x 8192 bytes) and at every start offset mod 8 agrees with
// 1-byte steps, which never take it; and splitting anywhere agrees too.
TEST(Crc32c, StreamsAgreeWithBytes) {
  std::string data(3 * 8192 * 2 + 3 * 256 + 64, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  for (size_t len : {767, 768, 769, 3 * 256 + 8, 24575, 24576, 24577, 24576 + 768 + 5,
                     2 * 24576 + 3 * 256 + 57}) {
    for (size_t off = 0; off < 8; ++off) {
      const std::string_view view(data.data() + off, len);
      uint32_t bytewise = 0;
      for (char ch : view) bytewise = Crc32c(std::string_view(&ch, 1), bytewise);
      EXPECT_EQ(Crc32c(view), bytewise) << "len " << len << " offset " << off;
      const size_t cut = len / 3 + off;
      EXPECT_EQ(Crc32c(view.substr(cut), Crc32c(view.substr(0, cut))), bytewise)
          << "len " << len << " split at " << cut;
    }
  }
}

}  // namespace
}  // namespace gradstream
