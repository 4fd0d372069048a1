// Dataset name dispatch.
#include "worker/data/load.h"

#include "absl/strings/str_cat.h"
#include "worker/data/cifar10.h"
#include "worker/data/mnist.h"

namespace gradstream {

absl::StatusOr<TrainTest> LoadDataset(const DatasetOptions& options) {
  if (options.name == "synthetic") return GenerateSynthetic(options.synthetic);
  if (options.name == "mnist") return LoadMnist(options.dir);
  if (options.name == "cifar10") return LoadCifar10(options.dir);
  return absl::NotFoundError(
      absl::StrCat("unknown dataset '", options.name, "' (want synthetic, mnist or cifar10)"));
}

}  // namespace gradstream
