// One entry point from a job's dataset name to train/test splits, so the
// worker and tools do not each switch over dataset kinds.
#ifndef GRADSTREAM_WORKER_DATA_LOAD_H_
#define GRADSTREAM_WORKER_DATA_LOAD_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"
#include "worker/data/synthetic.h"

namespace gradstream {

struct DatasetOptions {
  std::string name = "synthetic";  // "synthetic", "mnist" or "cifar10"
  std::string dir;                 // mnist: folder of the IDX files (plain or .gz);
                                   // cifar10: folder or archive, see LoadCifar10
  SyntheticConfig synthetic;       // synthetic only
};

// Generates or loads the named dataset. NotFound for an unknown name (and
// for missing files); otherwise the statuses of GenerateSynthetic,
// LoadMnist or LoadCifar10. Thread-compatible.
[[nodiscard]] absl::StatusOr<TrainTest> LoadDataset(const DatasetOptions& options);

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_DATA_LOAD_H_
