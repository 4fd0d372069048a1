// A fresh directory for a test's files, removed with everything in it when
// the object goes: under $TEST_TMPDIR when set, else /tmp.
#ifndef GRADSTREAM_COMMON_ENV_TESTING_TEMP_DIR_H_
#define GRADSTREAM_COMMON_ENV_TESTING_TEMP_DIR_H_

#include <string>
#include <vector>

namespace gradstream::testing {

// Not thread-safe.
class TempDir {
 public:
  TempDir();  // CHECK-fails when no directory can be made
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The names in the directory, sorted: to check that no temp file is left.
  std::vector<std::string> Names() const;

 private:
  std::string path_;
};

}  // namespace gradstream::testing

#endif  // GRADSTREAM_COMMON_ENV_TESTING_TEMP_DIR_H_
