// CRC32C (Castagnoli), for checkpoint checksums: Abseil 20220623 has no
// absl/crc. Table-driven, slicing-by-8.
#ifndef GRADSTREAM_SERVER_SHARD_INTERNAL_CRC32C_H_
#define GRADSTREAM_SERVER_SHARD_INTERNAL_CRC32C_H_

#include <cstdint>
#include <string_view>

namespace gradstream::shard::internal {

// Extends `crc` (0 to start) with `data`. Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);

}  // namespace gradstream::shard::internal

#endif  // GRADSTREAM_SERVER_SHARD_INTERNAL_CRC32C_H_
