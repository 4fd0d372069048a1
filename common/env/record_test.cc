#include "common/env/record.h"

#include <string>

#include "common/env/testing/mem_env.h"
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

// A record written in pieces is the same bytes as one written whole, and
// read in pieces it gives the payload back, with the same checks at the end.
TEST(RecordStream, WritesAndReadsInPieces) {
  testing::MemEnv env;
  const std::string payload = "first piece, second piece, third";
  {
    std::unique_ptr<WritableFile> file = *env.NewWritableFile("f");
    RecordWriter w(kFormat, file.get());
    ASSERT_TRUE(w.Append(payload.substr(0, 12)).ok());
    ASSERT_TRUE(w.Append(payload.substr(12, 14)).ok());
    ASSERT_TRUE(w.Append(payload.substr(26)).ok());
    ASSERT_TRUE(w.Finish().ok());
    EXPECT_EQ(w.bytes(), kRecordHeaderSize + payload.size());
  }
  EXPECT_EQ(*env.ReadFile("f"), EncodeRecord(kFormat, payload));
  auto read = [&](const std::string& data) -> absl::StatusOr<std::string> {
    env.PutFile("g", data);
    std::unique_ptr<SequentialFile> file = *env.NewSequentialFile("g");
    std::string header(kRecordHeaderSize, '\0');
    header.resize(*file->Read(header.data(), header.size()));
    absl::StatusOr<RecordReader> r = RecordReader::Open(kFormat, "/dir/g", header, file.get());
    if (!r.ok()) return r.status();
    std::string out(r->remaining(), '\0');
    for (size_t at = 0; at < out.size(); at += 5) {
      const size_t n = std::min<size_t>(5, out.size() - at);
      if (absl::Status s = r->Read(out.data() + at, n); !s.ok()) return s;
    }
    if (absl::Status s = r->Finish(); !s.ok()) return s;
    return out;
  };
  const std::string data = EncodeRecord(kFormat, payload);
  EXPECT_EQ(*read(data), payload);
  for (size_t i = 0; i < data.size(); ++i) {
    std::string bad = data;
    bad[i] ^= 0x01;
    absl::Status s = read(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "byte " << i;
    EXPECT_NE(s.message().find("/dir/g"), std::string::npos) << s;
  }
  for (size_t n : {size_t{0}, kRecordHeaderSize - 1, kRecordHeaderSize, data.size() - 1}) {
    EXPECT_EQ(read(data.substr(0, n)).status().code(), absl::StatusCode::kDataLoss) << n;
  }
  EXPECT_EQ(read(data + "x").status().code(), absl::StatusCode::kDataLoss);
  std::unique_ptr<WritableFile> empty = *env.NewWritableFile("e");
  RecordWriter w(kFormat, empty.get());
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_EQ(*env.ReadFile("e"), EncodeRecord(kFormat, ""));
}

}  // namespace
}  // namespace gradstream
