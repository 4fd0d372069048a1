// [log flags]: absl's flags and glog's --v / --vmodule on one command line,
// each with its own meaning.
#include "common/log_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "glog/logging.h"
#include "gtest/gtest.h"

// A flag of the binary's own, parsed beside glog's.
ABSL_FLAG(int, log_flags_test_answer, 0, "A flag of the test binary.");

namespace gradstream {
namespace {

std::vector<char*> Argv(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return argv;
}

TEST(LogFlags, MalformedVmoduleIsAClearErrorAndExitCode1) {
  std::vector<std::string> args = {"log_flags_test", "--vmodule=job"};
  std::vector<char*> argv = Argv(args);
  EXPECT_EXIT(ParseFlagsAndInitLogging(static_cast<int>(argv.size()), argv.data()),
              ::testing::ExitedWithCode(1), "--vmodule: 'job' is not pattern=level");
}

// Runs last in this process (glog initializes once).
TEST(LogFlags, VAndVmoduleReachGlogAndTheBinarysFlagsStillParse) {
  ASSERT_EQ(FLAGS_v, 0);
  ASSERT_FALSE(VLOG_IS_ON(1));
  std::vector<std::string> args = {"log_flags_test", "--v=2", "--vmodule=log_flags_test=5",
                                   "--log_flags_test_answer=42", "positional"};
  std::vector<char*> argv = Argv(args);
  std::vector<char*> rest = ParseFlagsAndInitLogging(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(absl::GetFlag(FLAGS_log_flags_test_answer), 42);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(std::string(rest[1]), "positional");
  // glog's own variable now holds --v: VLOG(2) in any file.
  EXPECT_EQ(FLAGS_v, 2);
  // --vmodule raised this file to 5 (glog matches the file's base name).
  EXPECT_TRUE(VLOG_IS_ON(5));
  EXPECT_FALSE(VLOG_IS_ON(6));
  EXPECT_TRUE(FLAGS_logtostderr);
}

}  // namespace
}  // namespace gradstream
