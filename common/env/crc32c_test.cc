#include "common/env/crc32c.h"

#include "gtest/gtest.h"

namespace gradstream {
namespace {

TEST(Crc32c, KnownVector) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("6789", Crc32c("12345")), 0xE3069283u);
}

}  // namespace
}  // namespace gradstream
