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

}  // namespace
}  // namespace gradstream
