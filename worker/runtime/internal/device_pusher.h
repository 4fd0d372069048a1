// Device-side encoding for a GPU worker: gradients are encoded where backward
// left them and only the packed codes cross PCIe.
//
// NOTE: [device encode] Enqueue() puts each tensor's chunk encodes (residuals
// in device memory, the host path's keys) and one copy of its codes into one
// of two alternating pinned host slots on the model's stream, behind the
// kernels that produce the gradient; a push thread hands each tensor's
// chunks to PsClient::PushEncoded in enqueue order. Scales are computed on
// the device and each chunk's header comes back in the copy of its codes, so
// Enqueue waits for the GPU only while both slots are in flight. Tensors
// with error feedback are guarded as on the host (common/job/precision.h):
// when a chunk's controller asks (MeasureDue), the host encoder's sums
// (|residual|^2, |g|^2, residual . g) are reduced on the device and read at
// the tensor's next push, which they decide (its codec, or exact). How and
// why: docs/design/device-encode.md.
#ifndef GRADSTREAM_WORKER_RUNTIME_INTERNAL_DEVICE_PUSHER_H_
#define GRADSTREAM_WORKER_RUNTIME_INTERNAL_DEVICE_PUSHER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/client/ps_client.h"
#include "worker/model/model.h"

namespace gradstream::internal {

// OK when gradients of a model on `device` can be encoded on the device:
// FailedPrecondition naming what is missing (a build without CUDA, no CUDA
// device present, a device other than gpu) otherwise.
[[nodiscard]] absl::Status DeviceEncodeSupported(Device device);

struct DevicePusherOptions {
  uint64_t seed = 1;       // the job seed (ClientOptions::seed)
  uint64_t worker_id = 0;  // ClientOptions::worker_id
  CodecPolicy codec;
  // Longest wait for a free pinned slot or for Finish().
  absl::Duration wait = absl::Minutes(1);
};

// Encodes and pushes the gradients of one GPU model through one client.
// Not thread-safe: Enqueue and Finish are called by the training thread
// (its own push thread is internal). `model` and `client` are not owned and
// must outlive it.
class DevicePusher {
 public:
  // Allocates residuals (zero), device payload buffers and the two pinned
  // slots for every tensor of client->shard_map(). FailedPrecondition as
  // DeviceEncodeSupported(model->device()); NotFound for a codec the device
  // encoders do not know; Internal for a failed allocation.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DevicePusher>> Create(
      Model* model, client::PsClient* client, const DevicePusherOptions& options);
  virtual ~DevicePusher() = default;

  // Enqueues the encode and the copy of tensor `tensor`'s gradient for clock
  // `clock` on the model's stream (see [device encode]). Internal for a CUDA
  // error, DeadlineExceeded when no slot frees up within options.wait.
  [[nodiscard]] virtual absl::Status Enqueue(int tensor, uint64_t clock) = 0;

  // Waits until every enqueued tensor was handed to the client and returns
  // the push handles in enqueue order; adds the device time spent encoding
  // and copying codes since the last Finish to *device_seconds. The first
  // error of the push thread if any: InvalidArgument for a gradient with
  // NaN/Inf when the codec computes a scale (that tensor is not pushed; a
  // chunk holding NaN/Inf keeps its residual), Internal for a CUDA error.
  [[nodiscard]] virtual absl::StatusOr<std::vector<client::PushHandle>> Finish(
      double* device_seconds) = 0;

  // L2 norm of all residuals; waits for the model's stream.
  [[nodiscard]] virtual absl::StatusOr<double> ResidualNorm() = 0;

  // Copies the residuals of tensor `tensor` (num_elems floats, in tensor
  // order) to host; waits for the model's stream. For tests.
  [[nodiscard]] virtual absl::StatusOr<std::vector<float>> Residuals(int tensor) = 0;

 protected:
  DevicePusher() = default;
};

}  // namespace gradstream::internal

#endif  // GRADSTREAM_WORKER_RUNTIME_INTERNAL_DEVICE_PUSHER_H_
