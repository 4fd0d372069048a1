// CRC32C (Castagnoli), the checksum of durable records (see record.h) and of
// the shard's legacy checkpoint frame: Abseil 20220623 has no absl/crc.
// SSE4.2 instruction where the CPU has it, else table-driven slicing-by-8.
#ifndef GRADSTREAM_COMMON_ENV_CRC32C_H_
#define GRADSTREAM_COMMON_ENV_CRC32C_H_

#include <cstdint>
#include <string_view>

namespace gradstream {

// Extends `crc` (0 to start) with `data`. Crc32c("123456789") == 0xE3069283.
// Thread-safe.
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_ENV_CRC32C_H_
