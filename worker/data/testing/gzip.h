// Test helper: gzip-compress bytes in memory, as gzip(1) writes a file (one
// member), so loader tests can build the compressed files they read.
#ifndef GRADSTREAM_WORKER_DATA_TESTING_GZIP_H_
#define GRADSTREAM_WORKER_DATA_TESTING_GZIP_H_

#include <zlib.h>

#include <string>

#include "gtest/gtest.h"

namespace gradstream::testing {

inline std::string Gzip(const std::string& bytes) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                         Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace gradstream::testing

#endif  // GRADSTREAM_WORKER_DATA_TESTING_GZIP_H_
