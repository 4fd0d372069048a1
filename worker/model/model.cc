// Model factory and name tables. The GPU backend is linked in only when the
// build has CUDA (GS_WORKER_MODEL_GPU); otherwise kGpu is refused cleanly.
#include "worker/model/model.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/model/internal/cpu_model.h"
#include "worker/model/internal/network.h"
#if GS_WORKER_MODEL_GPU
#include "worker/model/internal/gpu_model.h"
#endif

namespace gradstream {

std::string_view DeviceName(Device device) { return device == Device::kGpu ? "gpu" : "cpu"; }

absl::StatusOr<Device> DeviceFromName(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "gpu") return Device::kGpu;
  return absl::NotFoundError(
      absl::StrCat("unknown device '", std::string(name), "' (want cpu or gpu)"));
}

int NumGpuDevices() {
#if GS_WORKER_MODEL_GPU
  return internal::GpuDeviceCount();
#else
  return 0;
#endif
}

Device DefaultDevice() { return NumGpuDevices() > 0 ? Device::kGpu : Device::kCpu; }

int64_t Model::total_elems() const {
  int64_t n = 0;
  for (const TensorSpec& t : params()) n += t.num_elems;
  return n;
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config, Device device) {
  GS_ASSIGN_OR_RETURN(NetworkSpec net, BuildNetwork(config));
  if (device == Device::kCpu) return internal::CreateCpuModel(std::move(net));
#if GS_WORKER_MODEL_GPU
  if (internal::GpuDeviceCount() <= 0) {
    return absl::FailedPreconditionError("device gpu requested but no CUDA device is present");
  }
  return internal::CreateGpuModel(std::move(net));
#else
  return absl::FailedPreconditionError(
      "device gpu requested but this build has no CUDA (configure with GS_CUDA=ON)");
#endif
}

}  // namespace gradstream
