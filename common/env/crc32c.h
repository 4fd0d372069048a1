// CRC32C (Castagnoli), the checksum of durable records (see record.h) and of
// the shard's legacy checkpoint frame: Abseil 20220623 has no absl/crc.
// Carry-less multiplies where the CPU has VPCLMULQDQ, else the SSE4.2
// instruction where it has that, else table-driven slicing-by-8.
#ifndef GRADSTREAM_COMMON_ENV_CRC32C_H_
#define GRADSTREAM_COMMON_ENV_CRC32C_H_

#include <cstdint>
#include <string_view>

namespace gradstream {

// Extends `crc` (0 to start) with `data`. Crc32c("123456789") == 0xE3069283.
// Thread-safe.
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);

namespace crc32c_internal {
// For tests: Crc32c without the folded bulk ([crc fold] in crc32c.cc), and
// whether this CPU takes it (AVX-512F and VPCLMULQDQ).
uint32_t WithoutFold(std::string_view data, uint32_t crc = 0);
bool Folds();
}  // namespace crc32c_internal

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_ENV_CRC32C_H_
