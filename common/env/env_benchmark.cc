// What durability costs: Env::WriteFileAtomically() (write, fsync, rename,
// directory fsync) on the local disk, and CRC32C, by size.
#include <string>

#include "benchmark/benchmark.h"
#include "common/env/crc32c.h"
#include "common/env/env.h"
#include "common/env/record.h"
#include "common/env/testing/temp_dir.h"

namespace gradstream {
namespace {

void BM_WriteRecordAtomically(benchmark::State& state) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/record";
  const std::string payload(static_cast<size_t>(state.range(0)), 'x');
  constexpr RecordFormat kFormat{"benchmark", "GSBENCH1", 1};
  for (auto _ : state) {
    if (!Env::Default()->WriteFileAtomically(path, EncodeRecord(kFormat, payload)).ok()) {
      state.SkipWithError("write failed");
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_WriteRecordAtomically)->Arg(1 << 10)->Arg(1 << 20)->Arg(16 << 20)->UseRealTime();

void BM_Crc32c(benchmark::State& state) {
  const std::string data(static_cast<size_t>(state.range(0)), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(Crc32c(data));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Crc32c)->Arg(1 << 10)->Arg(16 << 10)->Arg(1 << 20);

}  // namespace
}  // namespace gradstream

BENCHMARK_MAIN();
