#include "common/port_file.h"

#include <string>
#include <vector>

#include "common/env/testing/fault_injection_env.h"
#include "common/env/testing/mem_env.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

TEST(PortFile, PlainTextThroughTheAtomicWrite) {
  testing::MemEnv mem;
  testing::FaultInjectionEnv env(&mem);
  ASSERT_TRUE(WritePortFile("/run/port", 4242, &env).ok());
  EXPECT_EQ(*mem.ReadFile("/run/port"), "4242\n");  // what tests and demo.sh read
  env.FailAt(testing::FaultPoint::kSync);
  EXPECT_EQ(WritePortFile("/run/port", 5353, &env).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(*mem.ReadFile("/run/port"), "4242\n");
  EXPECT_EQ(mem.FileNames(), std::vector<std::string>{"/run/port"});
}

}  // namespace
}  // namespace gradstream
