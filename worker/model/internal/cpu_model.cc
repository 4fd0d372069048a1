// CPU model: host buffers for parameters, gradients and activations, grown
// to the largest batch seen and then reused, so steady-state steps do not
// allocate.
#include "worker/model/internal/cpu_model.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/model/internal/cpu_ops.h"

namespace gradstream::internal {
namespace {

constexpr int kEvalBatch = 128;

cpu::ConvShape ConvOf(const LayerSpec& l) {
  return cpu::ConvShape{l.in.channels,  l.in.height, l.in.width,
                        l.out.channels, l.kernel,    l.padding};
}

class CpuModel final : public Model {
 public:
  explicit CpuModel(NetworkSpec net)
      : net_(std::move(net)), params_(InitialParams(net_, net_.config.init_seed)) {
    grads_.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) grads_[i].assign(params_[i].size(), 0.0f);
    acts_.resize(net_.layers.size());
    cols_.resize(net_.layers.size());
    argmax_.resize(net_.layers.size());
  }

  Device device() const override { return Device::kCpu; }
  const ModelConfig& config() const override { return net_.config; }
  const std::vector<TensorSpec>& params() const override { return net_.params; }
  float* param_data(int i) override { return params_.at(i).data(); }
  float* grad_data(int i) override { return grads_.at(i).data(); }

  absl::Status SetParam(int i, std::span<const float> values) override {
    GS_RETURN_IF_ERROR(CheckTensor(net_.params, i, values.size()));
    std::copy(values.begin(), values.end(), params_[i].begin());
    return absl::OkStatus();
  }
  absl::Status GetParam(int i, std::span<float> out) override {
    GS_RETURN_IF_ERROR(CheckTensor(net_.params, i, out.size()));
    std::copy(params_[i].begin(), params_[i].end(), out.begin());
    return absl::OkStatus();
  }
  absl::Status GetGrad(int i, std::span<float> out) override {
    GS_RETURN_IF_ERROR(CheckTensor(net_.params, i, out.size()));
    std::copy(grads_[i].begin(), grads_[i].end(), out.begin());
    return absl::OkStatus();
  }

  absl::Status ForwardBackward(const float* x, const int32_t* y, int batch,
                               StepStats* stats) override {
    GS_RETURN_IF_ERROR(CheckBatch(y, batch, net_.config.num_classes));
    if (x == nullptr) return absl::InvalidArgumentError("null input");
    Reserve(batch, /*train=*/true);
    const float* logits = Forward(x, batch, /*train=*/true);
    float* dout = dbuf_[0].data();
    StepStats s;
    s.loss = cpu::SoftmaxCrossEntropy(logits, y, batch, net_.config.num_classes, dout, &s.correct);
    Backward(x, batch);
    if (stats != nullptr) *stats = s;
    return absl::OkStatus();
  }

  absl::Status Evaluate(const Dataset& data, EvalStats* stats) override {
    return EvaluateInBatches(
        net_.config, data, kEvalBatch,
        [&](const float* x, const int32_t* y, int b) -> absl::StatusOr<BatchEval> {
          Reserve(b, /*train=*/false);
          const float* logits = Forward(x, b, /*train=*/false);
          BatchEval e;
          e.loss_sum = b * cpu::SoftmaxCrossEntropy(logits, y, b, net_.config.num_classes,
                                                    nullptr, &e.correct);
          return e;
        },
        stats);
  }

 private:
  // Grows buffers to hold `batch` examples. Conv unfoldings are kept per
  // example only when training (backward needs them); inference reuses one.
  void Reserve(int batch, bool train) {
    if (batch > act_capacity_) {
      act_capacity_ = batch;
      for (size_t l = 0; l < net_.layers.size(); ++l) {
        const LayerSpec& layer = net_.layers[l];
        acts_[l].resize(batch * layer.out.elems());
        if (layer.kind == LayerKind::kMaxPool) argmax_[l].resize(batch * layer.out.elems());
      }
      for (auto& d : dbuf_) d.resize(batch * net_.max_activation_elems);
    }
    const int col_batch = train ? batch : 1;
    if (col_batch > col_capacity_) {
      col_capacity_ = col_batch;
      for (size_t l = 0; l < net_.layers.size(); ++l) {
        if (net_.layers[l].kind != LayerKind::kConv) continue;
        const cpu::ConvShape s = ConvOf(net_.layers[l]);
        cols_[l].resize(col_batch * s.col_rows() * s.col_cols());
        dcol_.resize(std::max<size_t>(dcol_.size(), s.col_rows() * s.col_cols()));
      }
    }
  }

  // Runs every layer; returns the logits (acts_.back()).
  const float* Forward(const float* x, int batch, bool train) {
    const float* in = x;
    for (size_t l = 0; l < net_.layers.size(); ++l) {
      const LayerSpec& layer = net_.layers[l];
      float* out = acts_[l].data();
      switch (layer.kind) {
        case LayerKind::kDense:
          cpu::DenseForward(in, params_[layer.weight].data(), params_[layer.bias].data(), batch,
                            static_cast<int>(layer.in.elems()), layer.out.channels, out);
          break;
        case LayerKind::kRelu:
          cpu::ReluForward(in, batch * layer.out.elems(), out);
          break;
        case LayerKind::kConv:
          cpu::ConvForward(in, params_[layer.weight].data(), params_[layer.bias].data(), batch,
                           ConvOf(layer), train, cols_[l].data(), out);
          break;
        case LayerKind::kMaxPool:
          cpu::MaxPoolForward(in, batch, layer.in.channels, layer.in.height, layer.in.width, out,
                              argmax_[l].data());
          break;
      }
      in = out;
    }
    return in;
  }

  // Expects d(loss)/d(logits) in dbuf_[0]. Gradients flow through two
  // ping-pong buffers; the first layer's input gradient is never needed.
  void Backward(const float* x, int batch) {
    float* dout = dbuf_[0].data();
    float* din = dbuf_[1].data();
    for (int l = static_cast<int>(net_.layers.size()) - 1; l >= 0; --l) {
      const LayerSpec& layer = net_.layers[l];
      const float* in = l == 0 ? x : acts_[l - 1].data();
      float* dx = l == 0 ? nullptr : din;
      switch (layer.kind) {
        case LayerKind::kDense:
          cpu::DenseBackward(in, params_[layer.weight].data(), dout, batch,
                             static_cast<int>(layer.in.elems()), layer.out.channels,
                             grads_[layer.weight].data(), grads_[layer.bias].data(), dx);
          break;
        case LayerKind::kRelu:
          if (dx != nullptr)
            cpu::ReluBackward(acts_[l].data(), dout, batch * layer.out.elems(), dx);
          break;
        case LayerKind::kConv:
          cpu::ConvBackward(cols_[l].data(), params_[layer.weight].data(), dout, batch,
                            ConvOf(layer), grads_[layer.weight].data(), grads_[layer.bias].data(),
                            dx, dcol_.data());
          break;
        case LayerKind::kMaxPool:
          if (dx != nullptr) {
            cpu::MaxPoolBackward(dout, argmax_[l].data(), batch, layer.in.channels, layer.in.height,
                                 layer.in.width, dx);
          }
          break;
      }
      if (layer.weight >= 0) {
        NotifyGradReady(layer.weight);
        NotifyGradReady(layer.bias);
      }
      std::swap(dout, din);
    }
  }

  const NetworkSpec net_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> grads_;
  int act_capacity_ = 0;
  int col_capacity_ = 0;
  std::vector<std::vector<float>> acts_;      // output of layer l
  std::vector<std::vector<float>> cols_;      // conv layers: im2col unfoldings
  std::vector<std::vector<int32_t>> argmax_;  // pool layers: winning inputs
  std::vector<float> dbuf_[2];                // ping-pong activation gradients
  std::vector<float> dcol_;                   // conv backward scratch
};

}  // namespace

std::unique_ptr<Model> CreateCpuModel(NetworkSpec net) {
  return std::make_unique<CpuModel>(std::move(net));
}

}  // namespace gradstream::internal
