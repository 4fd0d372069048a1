// DevicePusher: see [device encode] in device_pusher.h. Without CUDA only
// the support check is compiled, and it says why the path is unavailable.
#include "worker/runtime/internal/device_pusher.h"

#include "absl/strings/str_cat.h"
#include "common/codec/cuda_codec.h"
#include "common/job/precision.h"
#include "common/status.h"

#ifdef GS_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#endif

namespace gradstream::internal {

absl::Status DeviceEncodeSupported(Device device) {
#ifndef GS_HAVE_CUDA
  (void)device;
  return absl::FailedPreconditionError(
      "device encoding needs a CUDA build of gradstream; this one was built without CUDA");
#else
  if (!cuda::DeviceAvailable()) {
    return absl::FailedPreconditionError("device encoding needs a CUDA device; none is present");
  }
  if (device != Device::kGpu) {
    return absl::FailedPreconditionError(
        absl::StrCat("device encoding needs the model on the gpu, not on the ",
                     std::string(DeviceName(device))));
  }
  return absl::OkStatus();
#endif
}

#ifndef GS_HAVE_CUDA

absl::StatusOr<std::unique_ptr<DevicePusher>> DevicePusher::Create(Model* model, client::PsClient*,
                                                                   const DevicePusherOptions&) {
  GS_RETURN_IF_ERROR(DeviceEncodeSupported(model->device()));
  return absl::FailedPreconditionError("device encoding is unavailable");
}

#else  // GS_HAVE_CUDA

namespace {

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Tensor bases in the device payload arena stay 256-byte aligned, so "none"
// chunks (fp32 payloads) are aligned for the encoder's float stores.
constexpr size_t kAlign = 256;

struct Chunk {
  uint32_t offset = 0;  // in the tensor
  uint32_t num_elems = 0;
  uint32_t chunk_id = 0;
};

// The sums per measured chunk: SumPathOnDevice's |e|^2, |s|^2 and e . s.
constexpr size_t kSums = 3;

// Chunk codes sit back to back, each at a 16-byte aligned offset (fp32
// payloads need aligned float stores).
size_t AlignCode(size_t bytes) { return (bytes + 15) / 16 * 16; }

// How one tensor is encoded. The codec is fixed for the job unless the
// tensor has error feedback: then each chunk's PrecisionController (the host
// encoder's policy, common/job/precision.h) may send it exact.
struct TensorPlan {
  CodecType type = CodecType::kNone;
  bool error_feedback = false;
  uint64_t num_elems = 0;
  std::vector<Chunk> chunks;
  bool stats = false;  // some chunk's codec reduces statistics first
  // In the device payload arena and in each copy to a slot: the chunks'
  // DeviceEncodeResults (results_bytes), then their codes.
  size_t results_bytes = 0;
  size_t payload_capacity = 0;  // results_bytes + the largest codes of all chunks, aligned
  size_t payload_base = 0;      // byte offset in the device payload arena
  size_t stats_base = 0;        // the first chunk's scratch in the statistics arena
  size_t residual_base = 0;     // float offset in the residual arena (error feedback only)
  std::vector<std::unique_ptr<PrecisionController>> precision;  // by chunk; error feedback only
  size_t norm_base = 0;  // this tensor's chunks' kSums sums in the norm arenas
  cudaEvent_t measured = nullptr;  // recorded after the norms' copy to host
  bool pending = false;            // the norms of pending_clock are on their way
  uint64_t pending_clock = 0;
  std::vector<bool> due;  // by chunk: measured at pending_clock (MeasureDue)
};

class DevicePusherImpl final : public DevicePusher {
 public:
  DevicePusherImpl(Model* model, client::PsClient* client, const DevicePusherOptions& options)
      : model_(model),
        client_(client),
        options_(options),
        stream_(static_cast<cudaStream_t>(model->stream())) {
    codec_options_.twobit_threshold = options.codec.twobit_threshold;
    codec_options_.ternary_clip = options.codec.ternary_clip;
  }

  ~DevicePusherImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
    // Queued encodes and copies still use the buffers freed below.
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (Slot& s : slots_) {
      if (s.host != nullptr) cudaFreeHost(s.host);
      if (s.begin != nullptr) cudaEventDestroy(s.begin);
      if (s.end != nullptr) cudaEventDestroy(s.end);
    }
    if (payload_ != nullptr) cudaFree(payload_);
    if (residual_ != nullptr) cudaFree(residual_);
    if (stats_ != nullptr) cudaFree(stats_);
    if (norms_ != nullptr) cudaFree(norms_);
    if (norms_host_ != nullptr) cudaFreeHost(norms_host_);
    for (TensorPlan& p : plans_) {
      if (p.measured != nullptr) cudaEventDestroy(p.measured);
    }
  }

  absl::Status Init() {
    GS_RETURN_IF_ERROR(DeviceEncodeSupported(model_->device()));
    GS_RETURN_IF_ERROR(Cuda(cudaGetDevice(&device_), "cudaGetDevice"));
    const ShardMap& map = client_->shard_map();
    if (map.tensors.size() != model_->params().size()) {
      return absl::InvalidArgumentError(absl::StrCat("shard map has ", map.tensors.size(),
                                                     " tensors, the model ",
                                                     model_->params().size()));
    }
    size_t payload_total = 0, residual_total = 0, max_tensor_bytes = 1, norm_total = 0,
           chunk_total = 0;
    for (const TensorInfo& t : map.tensors) {
      if (static_cast<int64_t>(t.num_elems) != model_->params()[t.index].num_elems) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has ", t.num_elems,
                                                       " elements in the map, not in the model"));
      }
      // The same choice as the client's own encoders (ps_client.cc), which
      // PushEncoded checks chunk by chunk.
      const std::string name =
          t.codec.empty() ? ResolveCodec(options_.codec, t.name, t.num_elems) : t.codec;
      TensorPlan p;
      GS_ASSIGN_OR_RETURN(p.type, CodecTypeFromName(name));
      if (p.type == CodecType::kHalf || p.type == CodecType::kInt8 ||
          p.type == CodecType::kInt4) {
        return absl::UnimplementedError(absl::StrCat("tensor '", t.name, "': ",
                                                     CodecTypeName(p.type),
                                                     " has no CUDA encoder; pick another codec "
                                                     "for a GPU worker"));
      }
      // The CUDA ternary encoder has one scale per chunk; a ternary512 tensor
      // goes out as ternary (PushEncoded accepts it).
      if (p.type == CodecType::kTernary512) p.type = CodecType::kTernary;
      p.error_feedback = p.type != CodecType::kNone && options_.codec.error_feedback;
      p.num_elems = t.num_elems;
      p.stats = cuda::EncodeReducesStats(p.type, codec_options_);
      PrecisionPolicy precision = PushPrecisionPolicy(
          p.type, options_.codec.precision_bound, options_.codec.precision_warmup,
          options_.codec.precision_max_owed);
      precision.ladder = DeviceLadderFrom(p.type);
      for (const ChunkInfo& c : map.chunks) {
        if (c.tensor != t.index) continue;
        p.chunks.push_back({static_cast<uint32_t>(c.offset), c.num_elems,
                            static_cast<uint32_t>(c.chunk_id)});
        const CodecType widest = p.error_feedback ? CodecType::kNone : p.type;
        p.payload_capacity += AlignCode(PayloadBytes(widest, c.num_elems));
        if (p.error_feedback) {
          p.precision.push_back(std::make_unique<PrecisionController>(precision));
        }
      }
      p.results_bytes = AlignCode(p.chunks.size() * sizeof(cuda::DeviceEncodeResult));
      p.payload_capacity += p.results_bytes;
      p.stats_base = chunk_total;
      chunk_total += p.chunks.size();
      p.payload_base = payload_total;
      payload_total += (p.payload_capacity + kAlign - 1) / kAlign * kAlign;
      if (p.error_feedback) {
        p.residual_base = residual_total;
        residual_total += t.num_elems;
        p.norm_base = norm_total;
        norm_total += kSums * p.chunks.size();
        p.due.assign(p.chunks.size(), false);
        GS_RETURN_IF_ERROR(Cuda(cudaEventCreateWithFlags(&p.measured, cudaEventDisableTiming),
                                "cudaEventCreate"));
      }
      max_tensor_bytes = std::max(max_tensor_bytes, p.payload_capacity);
      plans_.push_back(std::move(p));
    }
    residual_elems_ = residual_total;
    GS_RETURN_IF_ERROR(
        Cuda(cudaMalloc(&payload_, std::max<size_t>(payload_total, 1)), "cudaMalloc"));
    GS_RETURN_IF_ERROR(Cuda(
        cudaMalloc(reinterpret_cast<void**>(&residual_), std::max<size_t>(residual_total, 1) * 4),
        "cudaMalloc"));
    GS_RETURN_IF_ERROR(
        Cuda(cudaMemsetAsync(residual_, 0, residual_total * sizeof(float), stream_), "cudaMemset"));
    GS_RETURN_IF_ERROR(Cuda(
        cudaMalloc(&stats_, std::max<size_t>(chunk_total, 1) * cuda::kEncodeStatsBytes),
        "cudaMalloc"));
    const size_t norm_bytes = std::max<size_t>(norm_total, 1) * sizeof(double);
    GS_RETURN_IF_ERROR(
        Cuda(cudaMalloc(reinterpret_cast<void**>(&norms_), norm_bytes), "cudaMalloc"));
    GS_RETURN_IF_ERROR(Cuda(cudaMallocHost(reinterpret_cast<void**>(&norms_host_), norm_bytes),
                            "cudaMallocHost"));
    for (Slot& s : slots_) {
      GS_RETURN_IF_ERROR(Cuda(cudaMallocHost(&s.host, max_tensor_bytes), "cudaMallocHost"));
      GS_RETURN_IF_ERROR(Cuda(cudaEventCreate(&s.begin), "cudaEventCreate"));
      GS_RETURN_IF_ERROR(Cuda(cudaEventCreate(&s.end), "cudaEventCreate"));
    }
    GS_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
    thread_ = std::thread([this] { PushLoop(); });
    return absl::OkStatus();
  }

  absl::Status Enqueue(int tensor, uint64_t clock) override {
    if (tensor < 0 || tensor >= static_cast<int>(plans_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor, " of ", plans_.size()));
    }
    TensorPlan& p = plans_[tensor];
    // The error the last measured push left decides this push's codecs.
    GS_RETURN_IF_ERROR(ObservePending(p));
    const int s = next_slot_;
    {
      absl::MutexLock lock(&mu_);
      auto free = [this, s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !slots_[s].busy; };
      if (!mu_.AwaitWithTimeout(absl::Condition(&free), options_.wait)) {
        return absl::DeadlineExceededError("device encode: no pinned slot freed up");
      }
    }
    next_slot_ ^= 1;
    const size_t nc = p.chunks.size();
    Item item{tensor, clock, s, std::vector<client::EncodedChunkView>(nc)};
    Slot& slot = slots_[s];
    GS_RETURN_IF_ERROR(Cuda(cudaEventRecord(slot.begin, stream_), "cudaEventRecord"));
    const float* grad = model_->grad_data(tensor);
    auto* results = reinterpret_cast<cuda::DeviceEncodeResult*>(payload_ + p.payload_base);
    uint8_t* codes = payload_ + p.payload_base + p.results_bytes;
    uint8_t* stats = static_cast<uint8_t*>(stats_) + p.stats_base * cuda::kEncodeStatsBytes;
    if (p.stats) {
      GS_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(stats, 0, nc * cuda::kEncodeStatsBytes, stream_),
                              "cudaMemsetAsync"));
    }
    size_t used = 0;
    bool measure = false;
    for (size_t i = 0; i < nc; ++i) {
      const Chunk& c = p.chunks[i];
      EncodeKey key;
      key.seed = options_.seed;
      key.worker = static_cast<uint32_t>(options_.worker_id);
      key.clock = static_cast<uint32_t>(clock);
      key.tensor = static_cast<uint32_t>(tensor);
      key.chunk = c.chunk_id;
      float* residual = p.error_feedback ? residual_ + p.residual_base + c.offset : nullptr;
      CodecType type = p.type;
      if (!p.precision.empty()) {
        const PrecisionController& ctl = *p.precision[i];
        type = ctl.Codec();  // kNone: a flush or a raised chunk, sent exact
        p.due[i] = ctl.MeasureDue(clock);
        measure |= p.due[i];
        item.chunks[i].error_clocks = static_cast<float>(
            std::min(ctl.ratio(), static_cast<double>(std::numeric_limits<float>::max())));
        item.chunks[i].raised = ctl.raised();
        item.chunks[i].level = ctl.level_codec();
      }
      // The view names the codes where the slot will hold them (the copy
      // below); the push thread fills in the header from the slot.
      const size_t bytes = PayloadBytes(type, c.num_elems);
      item.chunks[i].payload = absl::string_view(
          reinterpret_cast<const char*>(slot.host) + p.results_bytes + used, bytes);
      GS_RETURN_IF_ERROR(cuda::EncodeOnDeviceAsync(
          type, codec_options_, grad + c.offset, residual, c.num_elems, key, codes + used,
          results + i, stats + i * cuda::kEncodeStatsBytes, stream_));
      used += AlignCode(bytes);
    }
    GS_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(slot.host, results, p.results_bytes + used,
                                            cudaMemcpyDeviceToHost, stream_),
                            "cudaMemcpyAsync"));
    GS_RETURN_IF_ERROR(Cuda(cudaEventRecord(slot.end, stream_), "cudaEventRecord"));
    // Chunks not due are done with this clock; the sums of those due (the
    // host encoder's, over the new residual and the gradient) are read at
    // the tensor's next push: behind the codes' copy, so the push never
    // waits for them.
    for (size_t i = 0; i < p.precision.size(); ++i) {
      if (!p.due[i]) p.precision[i]->Skip();
    }
    if (measure) {
      double* norms = norms_ + p.norm_base;
      GS_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(norms, 0, kSums * nc * sizeof(double), stream_),
                              "cudaMemsetAsync"));
      for (size_t i = 0; i < nc; ++i) {
        if (!p.due[i]) continue;
        const Chunk& c = p.chunks[i];
        GS_RETURN_IF_ERROR(cuda::SumPathOnDevice(residual_ + p.residual_base + c.offset,
                                                 grad + c.offset, c.num_elems, norms + kSums * i,
                                                 stream_));
      }
      GS_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(norms_host_ + p.norm_base, norms,
                                              kSums * nc * sizeof(double), cudaMemcpyDeviceToHost,
                                              stream_),
                              "cudaMemcpyAsync"));
      GS_RETURN_IF_ERROR(Cuda(cudaEventRecord(p.measured, stream_), "cudaEventRecord"));
      p.pending = true;
      p.pending_clock = clock;
    }
    absl::MutexLock lock(&mu_);
    slot.busy = true;
    queue_.push_back(std::move(item));
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<client::PushHandle>> Finish(double* device_seconds) override {
    absl::MutexLock lock(&mu_);
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&drained), options_.wait)) {
      return absl::DeadlineExceededError("device encode: codes not on the host in time");
    }
    *device_seconds += device_seconds_;
    device_seconds_ = 0;
    absl::Status s = std::exchange(status_, absl::OkStatus());
    std::vector<client::PushHandle> handles = std::exchange(handles_, {});
    if (!s.ok()) return s;
    return handles;
  }

  absl::StatusOr<double> ResidualNorm() override {
    std::vector<float> r(residual_elems_);
    GS_RETURN_IF_ERROR(CopyResiduals(0, r.size(), r.data()));
    double sq = 0;
    for (float x : r) sq += static_cast<double>(x) * x;
    return std::sqrt(sq);
  }

  absl::StatusOr<std::vector<float>> Residuals(int tensor) override {
    if (tensor < 0 || tensor >= static_cast<int>(plans_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor, " of ", plans_.size()));
    }
    const TensorPlan& p = plans_[tensor];
    std::vector<float> r(p.num_elems, 0.0f);
    if (p.error_feedback) GS_RETURN_IF_ERROR(CopyResiduals(p.residual_base, r.size(), r.data()));
    return r;
  }

 private:
  struct Slot {
    uint8_t* host = nullptr;  // pinned, the largest tensor's codes
    cudaEvent_t begin = nullptr, end = nullptr;
    bool busy = false;  // guarded by mu_: queued and not yet pushed
  };
  struct Item {
    int tensor;
    uint64_t clock;
    int slot;
    std::vector<client::EncodedChunkView> chunks;  // payloads in the slot, once copied
  };

  // Feeds the norms of the tensor's last measured push to its controllers.
  absl::Status ObservePending(TensorPlan& p) {
    if (!p.pending) return absl::OkStatus();
    p.pending = false;
    GS_RETURN_IF_ERROR(Cuda(cudaEventSynchronize(p.measured), "cudaEventSynchronize"));
    for (size_t i = 0; i < p.precision.size(); ++i) {
      if (!p.due[i]) continue;
      const double* n = norms_host_ + p.norm_base + kSums * i;
      p.precision[i]->Observe(p.pending_clock, n[0], n[1], 0.0, n[2]);
    }
    return absl::OkStatus();
  }

  absl::Status CopyResiduals(size_t begin, size_t n, float* out) {
    GS_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(out, residual_ + begin, n * sizeof(float),
                                            cudaMemcpyDeviceToHost, stream_),
                            "cudaMemcpyAsync"));
    return Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  // The push thread: one queued tensor at a time, in enqueue order.
  void PushLoop() {
    cudaSetDevice(device_);
    for (;;) {
      Item item;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || !queue_.empty();
        };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;
        item = queue_.front();
      }
      Slot& slot = slots_[item.slot];
      absl::Status s = Cuda(cudaEventSynchronize(slot.end), "cudaEventSynchronize");
      float ms = 0;
      if (s.ok()) s = Cuda(cudaEventElapsedTime(&ms, slot.begin, slot.end), "cudaEventElapsedTime");
      for (size_t i = 0; s.ok() && i < item.chunks.size(); ++i) {
        cuda::DeviceEncodeResult r;
        std::memcpy(&r, slot.host + i * sizeof(r), sizeof(r));
        if (r.non_finite) {
          // Nothing of the tensor is pushed; this chunk kept its residual.
          s = absl::InvalidArgumentError(absl::StrCat("device encode of tensor ", item.tensor,
                                                      " (", CodecTypeName(r.header.codec),
                                                      "): gradient holds NaN or Inf"));
        }
        item.chunks[i].header = r.header;
      }
      client::PushHandle handle;
      if (s.ok()) {
        // Copies the codes out of the slot before it returns.
        handle = client_->PushEncoded(static_cast<uint32_t>(item.tensor), item.chunks, item.clock);
      }
      absl::MutexLock lock(&mu_);
      queue_.pop_front();
      slot.busy = false;
      if (s.ok()) {
        handles_.push_back(std::move(handle));
        device_seconds_ += ms / 1e3;
      } else {
        status_.Update(s);
      }
    }
  }

  Model* const model_;
  client::PsClient* const client_;
  const DevicePusherOptions options_;
  const cudaStream_t stream_;
  CodecOptions codec_options_;
  int device_ = 0;
  std::vector<TensorPlan> plans_;  // by tensor index
  uint8_t* payload_ = nullptr;     // device: every tensor's codes
  float* residual_ = nullptr;      // device: residuals of error-feedback tensors
  void* stats_ = nullptr;          // device: kEncodeStatsBytes per chunk
  size_t residual_elems_ = 0;
  double* norms_ = nullptr;       // device: kSums per guarded chunk
  double* norms_host_ = nullptr;  // pinned: their copy, read by ObservePending
  Slot slots_[2];
  int next_slot_ = 0;  // training thread only

  absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);  // enqueued, not yet pushed
  std::vector<client::PushHandle> handles_ ABSL_GUARDED_BY(mu_);
  double device_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DevicePusher>> DevicePusher::Create(
    Model* model, client::PsClient* client, const DevicePusherOptions& options) {
  auto p = std::make_unique<DevicePusherImpl>(model, client, options);
  GS_RETURN_IF_ERROR(p->Init());
  return std::unique_ptr<DevicePusher>(std::move(p));
}

#endif  // GS_HAVE_CUDA

}  // namespace gradstream::internal
