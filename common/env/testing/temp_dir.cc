// See temp_dir.h.
#include "common/env/testing/temp_dir.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "glog/logging.h"

namespace gradstream::testing {

TempDir::TempDir() {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(root ? root : "/tmp") + "/gs_test.XXXXXX";
  CHECK(::mkdtemp(tmpl.data()) != nullptr) << "mkdtemp " << tmpl;
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;  // best effort: a test's leftovers must not fail it
  std::filesystem::remove_all(path_, ec);
}

std::vector<std::string> TempDir::Names() const {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(path_)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace gradstream::testing
