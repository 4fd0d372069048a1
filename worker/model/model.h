// Models a worker trains: softmax regression, an MLP and a LeNet-like CNN,
// on CPU (Eigen) or GPU (cuBLAS for dense layers, cuDNN for convolution and
// pooling).
//
// A model is a fixed, ordered list of named fp32 tensors (params()), each with
// a parameter buffer and a gradient buffer of the same size in the memory of
// the model's device: host memory on kCpu, device memory on kGpu. A training
// step is
//   for each i: SetParam(i, pulled_values)   // or write param_data(i) directly
//   ForwardBackward(x, y, batch, &stats)     // overwrites every grad_data(i)
//   for each i: encode grad_data(i)          // GPU: a device pointer, ordered
//                                            // on stream(); see [grad ready]
// Loss is the mean softmax cross-entropy over the batch, so gradients are
// batch means. Parameters start from a deterministic init: He normal
// (std = sqrt(2 / fan_in)) for every weight, zeros for biases; the same
// ModelConfig gives bit-identical initial parameters on CPU and GPU.
//
// NOTE: [grad ready] ForwardBackward computes gradients layer by layer from
// the output back. After the kernels producing a tensor's gradient are done
// (CPU) or enqueued on stream() (GPU), it calls the grad-ready callback with
// the tensor's index, so a caller can start encoding and pushing that tensor
// while earlier layers are still in backward. Work the callback enqueues on
// stream() is ordered after the gradient; work on another stream must wait
// on an event recorded on stream().
//
// NOTE: [model runtime] These models are the project's own code, not
// TorchScript run through libtorch: measured slower on the default models and
// a second implementation beside the GPU path. Decision and figures:
// docs/design/model-runtime.md.
//
// Not thread-safe: a model belongs to one training thread.
#ifndef GRADSTREAM_WORKER_MODEL_MODEL_H_
#define GRADSTREAM_WORKER_MODEL_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job/model.h"
#include "worker/data/dataset.h"

namespace gradstream {

enum class Device { kCpu, kGpu };
// "cpu" / "gpu" and back (NotFound for other names).
std::string_view DeviceName(Device device);
[[nodiscard]] absl::StatusOr<Device> DeviceFromName(std::string_view name);
// Number of usable CUDA devices; 0 when built without CUDA or none is present.
int NumGpuDevices();
// kGpu when a GPU is present, else kCpu (the default of the --device flag).
Device DefaultDevice();

struct StepStats {
  double loss = 0;  // mean cross-entropy of the batch
  int correct = 0;  // examples whose argmax logit is the label
};

struct EvalStats {
  double loss = 0;      // mean cross-entropy over the dataset
  double accuracy = 0;  // fraction classified correctly
  int64_t examples = 0;
};

class Model {
 public:
  using GradReadyFn = std::function<void(int tensor)>;

  virtual ~Model() = default;

  virtual Device device() const = 0;
  virtual const ModelConfig& config() const = 0;
  // The tensors, in a fixed order (the order of every per-tensor call here).
  virtual const std::vector<TensorSpec>& params() const = 0;
  int num_tensors() const { return static_cast<int>(params().size()); }
  int64_t total_elems() const;

  // Buffers of tensor i (params()[i].num_elems floats) in the memory of
  // device(); valid for the model's lifetime. Writing param_data(i) directly
  // is allowed (on GPU: by work ordered on stream()).
  virtual float* param_data(int i) = 0;
  virtual float* grad_data(int i) = 0;

  // Copies between host memory and tensor i; synchronous. InvalidArgument on
  // a bad index or a size other than params()[i].num_elems.
  [[nodiscard]] virtual absl::Status SetParam(int i, std::span<const float> values) = 0;
  [[nodiscard]] virtual absl::Status GetParam(int i, std::span<float> out) = 0;
  [[nodiscard]] virtual absl::Status GetGrad(int i, std::span<float> out) = 0;

  // One forward and backward pass on `batch` examples: x is host memory,
  // batch x config().input.elems() floats row-major; y holds batch labels.
  // Overwrites every gradient buffer with d(mean loss)/d(param). Returns when
  // stats are known; on GPU the gradients are complete in stream() order
  // (Synchronize() waits for them on the host). InvalidArgument for
  // batch <= 0 or a label outside [0, num_classes); Internal for a failed
  // CUDA/cuBLAS/cuDNN call.
  [[nodiscard]] virtual absl::Status ForwardBackward(const float* x, const int32_t* y, int batch,
                                                     StepStats* stats) = 0;

  // Forward only over the whole dataset, in batches; leaves gradients alone.
  // InvalidArgument when the dataset's shape or class count does not match.
  [[nodiscard]] virtual absl::Status Evaluate(const Dataset& data, EvalStats* stats) = 0;

  // See [grad ready]. Pass nullptr to clear. Called on the calling thread.
  void set_grad_ready_callback(GradReadyFn fn) { grad_ready_ = std::move(fn); }

  // The cudaStream_t that orders all of this model's GPU work, as void* so
  // this header needs no CUDA; nullptr on CPU.
  virtual void* stream() const { return nullptr; }
  // Waits for all work queued on stream(); a no-op on CPU.
  [[nodiscard]] virtual absl::Status Synchronize() { return absl::OkStatus(); }

 protected:
  void NotifyGradReady(int tensor) const {
    if (grad_ready_) grad_ready_(tensor);
  }

 private:
  GradReadyFn grad_ready_;
};

// Builds and initializes a model. Softmax and MLP read any input shape
// flattened (e.g. 1x28x28 MNIST as 784 features). InvalidArgument for an
// inconsistent config (fewer than 2 classes, a non-positive width, a CNN
// input too small for its kernels and pools); FailedPrecondition for kGpu
// when this build has no CUDA/cuDNN or no GPU is present; Internal when CUDA
// setup (stream, handles, allocations) fails.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelConfig& config,
                                                                 Device device);

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_MODEL_MODEL_H_
