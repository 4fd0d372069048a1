// A file in a string: written by Append/WriteAt, read from its start. For
// records kept in memory (EncodeCheckpoint / DecodeCheckpoint) and MemEnv's
// reads. Not thread-safe.
#ifndef GRADSTREAM_COMMON_ENV_STRING_FILE_H_
#define GRADSTREAM_COMMON_ENV_STRING_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/env/env.h"

namespace gradstream {

class StringFile final : public WritableFile, public SequentialFile {
 public:
  StringFile() = default;
  explicit StringFile(std::string data) : data_(std::move(data)) {}

  absl::Status Append(std::string_view data) override {
    data_.append(data);
    return absl::OkStatus();
  }
  absl::Status WriteAt(uint64_t offset, std::string_view data) override {
    if (offset > data_.size() || data.size() > data_.size() - offset) {
      return absl::OutOfRangeError(absl::StrCat("WriteAt past the end of ", data_.size(),
                                                " bytes"));
    }
    data_.replace(offset, data.size(), data);
    return absl::OkStatus();
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::Status Close() override { return absl::OkStatus(); }
  absl::StatusOr<size_t> Read(char* scratch, size_t n) override {
    const size_t got = data_.copy(scratch, n, pos_);
    pos_ += got;
    return got;
  }
  absl::StatusOr<uint64_t> Size() override { return data_.size(); }

  std::string& data() { return data_; }

 private:
  std::string data_;
  size_t pos_ = 0;
};

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_ENV_STRING_FILE_H_
