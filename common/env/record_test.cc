#include "common/env/record.h"

#include <string>

#include "gtest/gtest.h"

namespace gradstream {
namespace {

constexpr RecordFormat kFormat{"test", "GSTEST01", 3};

TEST(Record, RoundTrips) {
  const std::string data = EncodeRecord(kFormat, "payload bytes");
  EXPECT_EQ(data.size(), kRecordHeaderSize + 13);
  absl::StatusOr<std::string_view> back = DecodeRecord(kFormat, "f", data);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "payload bytes");
  EXPECT_TRUE(DecodeRecord(kFormat, "f", EncodeRecord(kFormat, "")).ok());
}

TEST(Record, EveryFlippedByteIsDataLossNamingTheFile) {
  const std::string data = EncodeRecord(kFormat, "some payload");
  for (size_t i = 0; i < data.size(); ++i) {
    std::string bad = data;
    bad[i] ^= 0x01;
    absl::StatusOr<std::string_view> r = DecodeRecord(kFormat, "/dir/file", bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << "byte " << i;
    EXPECT_NE(r.status().message().find("/dir/file"), std::string::npos) << r.status();
  }
}

TEST(Record, TruncatedAppendedOrForeignIsDataLoss) {
  const std::string data = EncodeRecord(kFormat, "some payload");
  for (size_t n :
       {size_t{0}, size_t{5}, kRecordHeaderSize - 1, kRecordHeaderSize, data.size() - 1}) {
    EXPECT_EQ(DecodeRecord(kFormat, "f", data.substr(0, n)).status().code(),
              absl::StatusCode::kDataLoss)
        << n << " bytes";
  }
  EXPECT_EQ(DecodeRecord(kFormat, "f", data + "x").status().code(), absl::StatusCode::kDataLoss);
  constexpr RecordFormat kOther{"other", "GSOTHER1", 3};
  EXPECT_EQ(DecodeRecord(kOther, "f", data).status().code(), absl::StatusCode::kDataLoss);
  constexpr RecordFormat kNewer{"test", "GSTEST01", 4};
  absl::Status s = DecodeRecord(kNewer, "f", data).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("version 3"), std::string::npos) << s;
}

}  // namespace
}  // namespace gradstream
