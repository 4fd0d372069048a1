// GPU model: parameters, gradients and activations live in device memory;
// every kernel, cuBLAS and cuDNN call is ordered on one stream owned by the
// model, so a caller's codec work on stream() needs no device-wide sync.
#include "worker/model/internal/gpu_model.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/model/internal/cuda_util.h"
#include "worker/model/internal/gpu_layers.h"
#include "worker/model/internal/gpu_ops.h"

namespace gradstream::internal {
namespace {

constexpr int kEvalBatch = 256;
// Tensors start on 256-byte boundaries inside the shared allocations, which
// keeps vectorized codec loads aligned.
constexpr int64_t kAlignFloats = 64;

class GpuModel final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Create(NetworkSpec net) {
    std::unique_ptr<GpuModel> m(new GpuModel(std::move(net)));
    GS_RETURN_IF_ERROR(m->Init());
    return std::unique_ptr<Model>(std::move(m));
  }

  ~GpuModel() override {
    // Buffers are freed after this body; make sure no queued work uses them.
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (dnn_ != nullptr) cudnnDestroy(dnn_);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stats_ready_ != nullptr) cudaEventDestroy(stats_ready_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::kGpu; }
  const ModelConfig& config() const override { return net_.config; }
  const std::vector<TensorSpec>& params() const override { return net_.params; }
  float* param_data(int i) override { return params_.get() + offsets_.at(i); }
  float* grad_data(int i) override { return grads_.get() + offsets_.at(i); }
  void* stream() const override { return stream_; }

  absl::Status Synchronize() override {
    GS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::Status SetParam(int i, std::span<const float> values) override {
    GS_RETURN_IF_ERROR(CheckTensor(net_.params, i, values.size()));
    GS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(param_data(i), values.data(),
                                            values.size() * sizeof(float), cudaMemcpyHostToDevice,
                                            stream_));
    return Synchronize();
  }
  absl::Status GetParam(int i, std::span<float> out) override {
    GS_RETURN_IF_ERROR(CheckTensor(net_.params, i, out.size()));
    return CopyToHost(param_data(i), out);
  }
  absl::Status GetGrad(int i, std::span<float> out) override {
    GS_RETURN_IF_ERROR(CheckTensor(net_.params, i, out.size()));
    return CopyToHost(grad_data(i), out);
  }

  absl::Status ForwardBackward(const float* x, const int32_t* y, int batch,
                               StepStats* stats) override {
    GS_RETURN_IF_ERROR(CheckBatch(y, batch, net_.config.num_classes));
    if (x == nullptr) return absl::InvalidArgumentError("null input");
    GS_RETURN_IF_ERROR(Reserve(batch));
    GS_RETURN_IF_ERROR(Upload(x, y, batch));
    GS_RETURN_IF_ERROR(Forward(batch));
    GS_RETURN_IF_ERROR(LossAndStats(batch, /*want_grad=*/true));
    // The stats copy is queued before backward, so the host can wait for it
    // while backward (and whatever grad-ready callbacks queue) still runs.
    GS_CUDA_RETURN_IF_ERROR(cudaEventRecord(stats_ready_, stream_));
    GS_RETURN_IF_ERROR(Backward(batch));
    GS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stats_ready_));
    if (stats != nullptr) {
      StepStats s;
      SumStats(batch, &s.loss, &s.correct);
      s.loss /= batch;
      *stats = s;
    }
    return absl::OkStatus();
  }

  absl::Status Evaluate(const Dataset& data, EvalStats* stats) override {
    return EvaluateInBatches(
        net_.config, data, kEvalBatch,
        [&](const float* x, const int32_t* y, int b) -> absl::StatusOr<BatchEval> {
          GS_RETURN_IF_ERROR(Reserve(b));
          GS_RETURN_IF_ERROR(Upload(x, y, b));
          GS_RETURN_IF_ERROR(Forward(b));
          GS_RETURN_IF_ERROR(LossAndStats(b, /*want_grad=*/false));
          GS_RETURN_IF_ERROR(Synchronize());
          BatchEval e;
          SumStats(b, &e.loss_sum, &e.correct);
          return e;
        },
        stats);
  }

 private:
  explicit GpuModel(NetworkSpec net) : net_(std::move(net)) {}

  absl::Status Init() {
    GS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    GS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&stats_ready_, cudaEventDisableTiming));
    GS_CUBLAS_RETURN_IF_ERROR(cublasCreate(&blas_));
    GS_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas_, stream_));
    // Plain FP32 GEMMs (no TF32), to match the CPU path; see gpu_layers.h.
    GS_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    GS_CUDNN_RETURN_IF_ERROR(cudnnCreate(&dnn_));
    GS_CUDNN_RETURN_IF_ERROR(cudnnSetStream(dnn_, stream_));

    int64_t total = 0;
    for (const TensorSpec& t : net_.params) {
      offsets_.push_back(total);
      total += (t.num_elems + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    }
    GS_RETURN_IF_ERROR(params_.Grow(std::max<int64_t>(total, 1)));
    GS_RETURN_IF_ERROR(grads_.Grow(std::max<int64_t>(total, 1)));
    GS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grads_.get(), 0, total * sizeof(float), stream_));
    const std::vector<std::vector<float>> init = InitialParams(net_, net_.config.init_seed);
    for (size_t i = 0; i < init.size(); ++i) {
      GS_RETURN_IF_ERROR(SetParam(static_cast<int>(i), init[i]));
    }

    conv_.resize(net_.layers.size());
    pool_.resize(net_.layers.size());
    acts_.resize(net_.layers.size());
    for (size_t l = 0; l < net_.layers.size(); ++l) {
      const LayerSpec& layer = net_.layers[l];
      if (layer.kind == LayerKind::kConv) {
        GS_ASSIGN_OR_RETURN(conv_[l], gpu::ConvLayer::Create(layer));
      } else if (layer.kind == LayerKind::kMaxPool) {
        GS_ASSIGN_OR_RETURN(pool_[l], gpu::PoolLayer::Create(layer));
      }
    }
    return Synchronize();
  }

  absl::Status CopyToHost(const float* src, std::span<float> out) {
    GS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data(), src, out.size() * sizeof(float),
                                            cudaMemcpyDeviceToHost, stream_));
    return Synchronize();
  }

  // Grows device buffers to `batch` examples and points the cuDNN
  // descriptors at that batch size.
  absl::Status Reserve(int batch) {
    if (batch > capacity_) {
      for (size_t l = 0; l < net_.layers.size(); ++l) {
        GS_RETURN_IF_ERROR(acts_[l].Grow(batch * net_.layers[l].out.elems()));
      }
      GS_RETURN_IF_ERROR(input_.Grow(batch * net_.config.input.elems()));
      GS_RETURN_IF_ERROR(labels_.Grow(batch));
      for (auto& d : dbuf_) GS_RETURN_IF_ERROR(d.Grow(batch * net_.max_activation_elems));
      GS_RETURN_IF_ERROR(row_loss_.Grow(batch));
      GS_RETURN_IF_ERROR(row_correct_.Grow(batch));
      GS_RETURN_IF_ERROR(host_loss_.Grow(batch));
      GS_RETURN_IF_ERROR(host_correct_.Grow(batch));
      capacity_ = batch;
    }
    if (batch != batch_) {
      size_t need = 0;
      for (size_t l = 0; l < net_.layers.size(); ++l) {
        if (conv_[l]) {
          size_t bytes = 0;
          GS_RETURN_IF_ERROR(conv_[l]->SetBatch(dnn_, batch, &bytes));
          need = std::max(need, bytes);
        }
        if (pool_[l]) GS_RETURN_IF_ERROR(pool_[l]->SetBatch(batch));
      }
      if (need > workspace_.size()) {
        // The old workspace may still be in use by queued work.
        GS_RETURN_IF_ERROR(Synchronize());
        GS_RETURN_IF_ERROR(workspace_.Grow(need));
      }
      batch_ = batch;
    }
    return absl::OkStatus();
  }

  absl::Status Upload(const float* x, const int32_t* y, int batch) {
    // Pageable sources: cudaMemcpyAsync returns once the bytes are staged, so
    // the caller may reuse its buffers right away.
    GS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(input_.get(), x,
                                            sizeof(float) * batch * net_.config.input.elems(),
                                            cudaMemcpyHostToDevice, stream_));
    GS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(labels_.get(), y, sizeof(int32_t) * batch,
                                            cudaMemcpyHostToDevice, stream_));
    return absl::OkStatus();
  }

  const float* LayerInput(size_t l) const { return l == 0 ? input_.get() : acts_[l - 1].get(); }

  absl::Status Forward(int batch) {
    for (size_t l = 0; l < net_.layers.size(); ++l) {
      const LayerSpec& layer = net_.layers[l];
      const float* in = LayerInput(l);
      float* out = acts_[l].get();
      switch (layer.kind) {
        case LayerKind::kDense:
          GS_RETURN_IF_ERROR(gpu::DenseForward(
              blas_, stream_, in, param_data(layer.weight), param_data(layer.bias), batch,
              static_cast<int>(layer.in.elems()), layer.out.channels, out));
          break;
        case LayerKind::kRelu:
          GS_RETURN_IF_ERROR(gpu::ReluForward(in, batch * layer.out.elems(), out, stream_));
          break;
        case LayerKind::kConv:
          GS_RETURN_IF_ERROR(conv_[l]->Forward(dnn_, in, param_data(layer.weight),
                                               param_data(layer.bias), out, workspace_.get(),
                                               workspace_.size()));
          break;
        case LayerKind::kMaxPool:
          GS_RETURN_IF_ERROR(pool_[l]->Forward(dnn_, in, out));
          break;
      }
    }
    return absl::OkStatus();
  }

  // Per-row loss and correctness into pinned host memory (queued, not
  // waited for); d(loss)/d(logits) into dbuf_[0] when want_grad.
  absl::Status LossAndStats(int batch, bool want_grad) {
    GS_RETURN_IF_ERROR(gpu::SoftmaxCrossEntropy(
        acts_.back().get(), labels_.get(), batch, net_.config.num_classes,
        want_grad ? dbuf_[0].get() : nullptr, row_loss_.get(), row_correct_.get(), stream_));
    GS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_loss_.get(), row_loss_.get(),
                                            sizeof(double) * batch, cudaMemcpyDeviceToHost,
                                            stream_));
    GS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_correct_.get(), row_correct_.get(),
                                            sizeof(int32_t) * batch, cudaMemcpyDeviceToHost,
                                            stream_));
    return absl::OkStatus();
  }

  // Sums the copied per-row stats in row order (same order as the CPU path).
  void SumStats(int batch, double* loss, int* correct) const {
    double sum = 0;
    int right = 0;
    for (int r = 0; r < batch; ++r) {
      sum += host_loss_.get()[r];
      right += host_correct_.get()[r];
    }
    *loss = sum;
    *correct = right;
  }

  // Mirrors CpuModel::Backward: ping-pong gradient buffers, no input
  // gradient for the first layer, grad-ready after each parameter layer.
  absl::Status Backward(int batch) {
    float* dout = dbuf_[0].get();
    float* din = dbuf_[1].get();
    for (int l = static_cast<int>(net_.layers.size()) - 1; l >= 0; --l) {
      const LayerSpec& layer = net_.layers[l];
      const float* in = LayerInput(l);
      float* dx = l == 0 ? nullptr : din;
      switch (layer.kind) {
        case LayerKind::kDense:
          GS_RETURN_IF_ERROR(gpu::DenseBackward(blas_, stream_, in, param_data(layer.weight), dout,
                                                batch, static_cast<int>(layer.in.elems()),
                                                layer.out.channels, grad_data(layer.weight),
                                                grad_data(layer.bias), dx));
          break;
        case LayerKind::kRelu:
          if (dx != nullptr) {
            GS_RETURN_IF_ERROR(
                gpu::ReluBackward(acts_[l].get(), dout, batch * layer.out.elems(), dx, stream_));
          }
          break;
        case LayerKind::kConv:
          GS_RETURN_IF_ERROR(conv_[l]->Backward(dnn_, in, param_data(layer.weight), dout,
                                                grad_data(layer.weight), grad_data(layer.bias), dx,
                                                workspace_.get(), workspace_.size()));
          break;
        case LayerKind::kMaxPool:
          if (dx != nullptr) {
            GS_RETURN_IF_ERROR(pool_[l]->Backward(dnn_, in, acts_[l].get(), dout, dx));
          }
          break;
      }
      if (layer.weight >= 0) {
        NotifyGradReady(layer.weight);
        NotifyGradReady(layer.bias);
      }
      std::swap(dout, din);
    }
    return absl::OkStatus();
  }

  const NetworkSpec net_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t stats_ready_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;

  std::vector<int64_t> offsets_;  // tensor i starts at params_/grads_ + offsets_[i]
  CudaArray<float> params_;
  CudaArray<float> grads_;

  std::vector<std::unique_ptr<gpu::ConvLayer>> conv_;  // by layer index; null if not conv
  std::vector<std::unique_ptr<gpu::PoolLayer>> pool_;  // by layer index; null if not pool
  int capacity_ = 0;                                   // examples the buffers hold
  int batch_ = 0;                                      // batch size the descriptors are set for
  std::vector<CudaArray<float>> acts_;
  CudaArray<float> input_;
  CudaArray<int32_t> labels_;
  CudaArray<float> dbuf_[2];
  CudaArray<std::byte> workspace_;
  CudaArray<double> row_loss_;
  CudaArray<int32_t> row_correct_;
  CudaArray<double, /*kPinnedHost=*/true> host_loss_;
  CudaArray<int32_t, /*kPinnedHost=*/true> host_correct_;
};

}  // namespace

int GpuDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}

absl::StatusOr<std::unique_ptr<Model>> CreateGpuModel(NetworkSpec net) {
  return GpuModel::Create(std::move(net));
}

}  // namespace gradstream::internal
