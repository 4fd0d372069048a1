// CUDA codec kernels and their launchers (see cuda_codec.h for the contract).
//
// Layout of the work: one thread per payload byte -- four elements for
// twobit and ternary, eight for onebit -- so a warp reads consecutive
// elements. Statistics use a grid-stride loop, a shared-memory block
// reduction and fp64 atomics; the encode kernel that follows derives the
// scale from them (thread 0 of each block, with the host's own functions in
// internal/kernels.h) and block 0 writes the header, so nothing is read back
// between the two.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/codec/codec_kernel.cuh"
#include "common/codec/cuda_codec.h"
#include "common/codec/internal/kernels.h"
#include "common/status.h"

namespace gradstream {
namespace cuda {
namespace {

constexpr int kThreads = 256;

struct DeviceStats {  // kEncodeStatsBytes of scratch (cuda_codec.h)
  unsigned int max_abs_bits;  // non-negative floats order like their bits
  int nan;
  double sum, sum_sq, sum_abs, pos_sum, neg_sum;
  unsigned long long pos_count, neg_count;  // x > 0 and x < 0: see [onebit zeros]
};

static_assert(sizeof(DeviceStats) <= kEncodeStatsBytes && alignof(DeviceStats) <= 8,
              "the callers' statistics scratch");

__global__ void StatsKernel(const float* g, const float* r, uint32_t n, DeviceStats* out) {
  __shared__ double sh[5][kThreads];
  __shared__ unsigned int shmax[kThreads];
  __shared__ unsigned int shcount[kThreads];
  __shared__ unsigned int shncount[kThreads];
  double s = 0, q = 0, a = 0, p = 0, m = 0;
  float mx = 0.0f;
  unsigned int cnt = 0, ncnt = 0;
  int nan = 0;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float x = device::LoadX(g, r, i);
    const double d = x;
    s += d;
    q += d * d;
    a += fabs(d);
    if (x > 0.0f) {
      p += d;
      ++cnt;
    } else if (x < 0.0f) {
      m += d;
      ++ncnt;
    }
    nan |= isnan(x);
    mx = fmaxf(mx, fabsf(x));
  }
  const int t = threadIdx.x;
  sh[0][t] = s;
  sh[1][t] = q;
  sh[2][t] = a;
  sh[3][t] = p;
  sh[4][t] = m;
  shmax[t] = __float_as_uint(mx);
  shcount[t] = cnt;
  shncount[t] = ncnt;
  if (nan) atomicOr(&out->nan, 1);
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      for (int k = 0; k < 5; ++k) sh[k][t] += sh[k][t + stride];
      shmax[t] = max(shmax[t], shmax[t + stride]);
      shcount[t] += shcount[t + stride];
      shncount[t] += shncount[t + stride];
    }
    __syncthreads();
  }
  if (t == 0) {
    atomicAdd(&out->sum, sh[0][0]);
    atomicAdd(&out->sum_sq, sh[1][0]);
    atomicAdd(&out->sum_abs, sh[2][0]);
    atomicAdd(&out->pos_sum, sh[3][0]);
    atomicAdd(&out->neg_sum, sh[4][0]);
    atomicMax(&out->max_abs_bits, shmax[0]);
    atomicAdd(&out->pos_count, static_cast<unsigned long long>(shcount[0]));
    atomicAdd(&out->neg_count, static_cast<unsigned long long>(shncount[0]));
  }
}

__global__ void SumPathKernel(const float* e, const float* s, uint32_t n, double* out) {
  __shared__ double sh[3][kThreads];
  double qe = 0, qs = 0, dot = 0;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const double x = e[i], y = s[i];
    qe += x * x;
    qs += y * y;
    dot += x * y;
  }
  const int t = threadIdx.x;
  sh[0][t] = qe;
  sh[1][t] = qs;
  sh[2][t] = dot;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      for (int k = 0; k < 3; ++k) sh[k][t] += sh[k][t + stride];
    }
    __syncthreads();
  }
  if (t == 0) {
    for (int k = 0; k < 3; ++k) atomicAdd(&out[k], sh[k][0]);
  }
}

// Block 0's first thread publishes the chunk's header; `bad` means NaN/Inf
// input, in which case nothing else is written.
__device__ __forceinline__ void WriteResult(DeviceEncodeResult* res, CodecType type, uint32_t n,
                                            float scale, float scale2, bool bad) {
  if (res == nullptr || blockIdx.x != 0) return;
  res->header.codec = type;
  res->header.num_elems = n;
  res->header.scale = scale;
  res->header.scale2 = scale2;
  res->non_finite = bad;
}

__global__ void EncodeF32Kernel(const float* g, float* r, uint32_t n, float* out,
                                DeviceEncodeResult* res) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) WriteResult(res, CodecType::kNone, n, 0.0f, 0.0f, false);
  if (i >= n) return;
  out[i] = device::LoadX(g, r, i);
  if (r) r[i] = 0.0f;
}

// `st` null: the fixed threshold `fixed_t`; otherwise the adaptive one.
__global__ void EncodeTwoBitKernel(const float* g, float* r, uint32_t n, float fixed_t,
                                   const DeviceStats* st, uint8_t* out, DeviceEncodeResult* res) {
  __shared__ float sh_t;
  __shared__ bool sh_bad;
  if (threadIdx.x == 0) {
    float t = fixed_t;
    bool bad = false;
    if (st != nullptr) {
      bad = st->nan || !isfinite(st->sum_abs);
      t = internal::AdaptiveThreshold(st->sum_abs, n);
    }
    sh_t = t > 0.0f ? t : INFINITY;
    sh_bad = bad;
    WriteResult(res, CodecType::kTwoBit, n, t, 0.0f, bad);
  }
  __syncthreads();
  const uint32_t byte = blockIdx.x * blockDim.x + threadIdx.x;
  if (sh_bad || byte >= (n + 3) / 4) return;
  const float t = sh_t;
  uint32_t codes = 0;
  for (uint32_t j = 0; j < 4; ++j) {
    const uint32_t i = 4 * byte + j;
    if (i >= n) break;
    float res_i;
    codes |= device::TwoBitCode(device::LoadX(g, r, i), t, &res_i) << (2 * j);
    if (r) r[i] = res_i;
  }
  out[byte] = static_cast<uint8_t>(codes);
}

// The four threads of a Philox block (16 elements) each compute its draw
// and use their 4 of its 16 random bytes: cheaper than one thread per block,
// whose loads were 64 bytes apart. A scale of 0 (an all-zero or constant
// chunk) sends all-zero codes and keeps x in the residual, as the CPU
// encoder does.
__global__ void EncodeTernaryKernel(const float* g, float* r, uint32_t n, float clip_factor,
                                    const DeviceStats* st, PhiloxKey key, uint32_t worker,
                                    uint32_t clock, uint8_t* out, DeviceEncodeResult* res) {
  __shared__ float sh_clip, sh_s, sh_inv;
  __shared__ bool sh_bad;
  if (threadIdx.x == 0) {
    const float max_abs = __uint_as_float(st->max_abs_bits);
    const bool bad = st->nan || !isfinite(max_abs) || !isfinite(st->sum_sq);
    const internal::TernaryParams p =
        internal::TernaryParamsFromMoments(max_abs, st->sum, st->sum_sq, n, clip_factor);
    sh_clip = p.clip;
    sh_s = p.scale;
    sh_inv = p.scale > 0.0f ? internal::InverseScale(p.scale) : 0.0f;
    sh_bad = bad;
    WriteResult(res, CodecType::kTernary, n, p.scale, 0.0f, bad);
  }
  __syncthreads();
  const uint32_t byte = blockIdx.x * blockDim.x + threadIdx.x;
  if (sh_bad || byte >= (n + 3) / 4) return;
  const float clip = sh_clip, s = sh_s, inv_s = sh_inv;
  const bool zero = !(s > 0.0f);
  static_assert(kDrawsPerBlock == 16, "four payload bytes per Philox block");
  const uint32_t block = byte / 4, first_draw = 4 * (byte % 4);
  const PhiloxCounter rnd = CodecPhilox(PhiloxCounter{block, worker, clock, 0}, key);
  uint32_t codes = 0;
  for (uint32_t j = 0; j < 4; ++j) {
    const uint32_t i = 4 * byte + j;
    if (i >= n) break;
    const float x = device::LoadX(g, r, i);
    float res_i = x;
    if (!zero) {
      codes |= device::TernaryCode(x, clip, s, inv_s, BlockBits8(rnd, first_draw + j), &res_i)
               << (2 * j);
    }
    if (r) r[i] = res_i;
  }
  out[byte] = static_cast<uint8_t>(codes);
}

__global__ void EncodeOneBitKernel(const float* g, float* r, uint32_t n, const DeviceStats* st,
                                   uint8_t* out, DeviceEncodeResult* res) {
  __shared__ float sh_pos, sh_neg;
  __shared__ bool sh_bad;
  if (threadIdx.x == 0) {
    const bool bad = st->nan || !isfinite(st->pos_sum) || !isfinite(st->neg_sum);
    const internal::OneBitParams p = internal::OneBitParamsFromSums(
        st->pos_sum, static_cast<uint32_t>(st->pos_count), st->neg_sum,
        static_cast<uint32_t>(st->neg_count));
    sh_pos = p.pos;
    sh_neg = p.neg;
    sh_bad = bad;
    WriteResult(res, CodecType::kOneBit, n, p.pos, p.neg, bad);
  }
  __syncthreads();
  const uint32_t byte = blockIdx.x * blockDim.x + threadIdx.x;
  if (sh_bad || byte >= (n + 7) / 8) return;
  const float pos = sh_pos, neg = sh_neg;
  const bool zero_bit = internal::OneBitZeroBit(pos, neg);
  uint32_t bits = 0;
  for (uint32_t j = 0; j < 8; ++j) {
    const uint32_t i = 8 * byte + j;
    if (i >= n) break;
    const float x = device::LoadX(g, r, i);
    const bool b = x > 0.0f || (x == 0.0f && zero_bit);
    bits |= static_cast<uint32_t>(b) << j;
    if (r) r[i] = __fsub_rn(x, b ? pos : neg);
  }
  out[byte] = static_cast<uint8_t>(bits);
}

// Sets *bad when a 2-bit code is 11 or a padding bit is set.
__global__ void Validate2BitKernel(const uint8_t* p, uint32_t n, int* bad) {
  const uint32_t byte = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t bytes = (n + 3) / 4;
  if (byte >= bytes) return;
  const uint8_t v = p[byte];
  bool b = (v & (v >> 1) & 0x55) != 0;
  if (byte == bytes - 1 && n % 4 != 0) b |= (v >> (2 * (n % 4))) != 0;
  if (b) atomicOr(bad, 1);
}

__global__ void ValidateOneBitKernel(const uint8_t* p, uint32_t n, int* bad) {
  if (blockIdx.x == 0 && threadIdx.x == 0 && n % 8 != 0 && (p[(n + 7) / 8 - 1] >> (n % 8)) != 0) {
    *bad = 1;
  }
}

__global__ void FiniteF32Kernel(const float* p, uint32_t n, int* bad) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && !isfinite(p[i])) atomicOr(bad, 1);
}

__global__ void DecodeAdd2BitKernel(const uint8_t* p, uint32_t n, float ws, float* acc) {
  const uint32_t byte = blockIdx.x * blockDim.x + threadIdx.x;
  if (byte >= (n + 3) / 4) return;
  const uint8_t v = p[byte];
  for (uint32_t j = 0; j < 4; ++j) {
    const uint32_t i = 4 * byte + j;
    if (i >= n) break;
    const uint32_t c = (v >> (2 * j)) & 3;
    acc[i] = __fadd_rn(acc[i], c == 1 ? ws : c == 2 ? -ws : 0.0f);
  }
}

__global__ void DecodeAdd1BitKernel(const uint8_t* p, uint32_t n, float wpos, float wneg,
                                    float* acc) {
  const uint32_t byte = blockIdx.x * blockDim.x + threadIdx.x;
  if (byte >= (n + 7) / 8) return;
  const uint8_t v = p[byte];
  for (uint32_t j = 0; j < 8; ++j) {
    const uint32_t i = 8 * byte + j;
    if (i >= n) break;
    acc[i] = __fadd_rn(acc[i], ((v >> j) & 1) ? wpos : wneg);
  }
}

__global__ void DecodeAddF32Kernel(const float* p, uint32_t n, float w, float* acc) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] = __fadd_rn(acc[i], __fmul_rn(w, p[i]));
}

// At least one block, so that block 0 writes the header even for n == 0.
unsigned Blocks(uint64_t threads) {
  return std::max(1u, static_cast<unsigned>((threads + kThreads - 1) / kThreads));
}

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

absl::Status CheckLaunch(const char* what) { return Check(cudaGetLastError(), what); }

// Small device scratch with host readback; freed on scope exit.
template <typename T>
class Scratch {
 public:
  // Initialized, not assigned: nvcc warns of operator='s unread result
  // (absl::Status is [[nodiscard]]). ptr_ is declared before status_.
  explicit Scratch(cudaStream_t s)
      : stream_(s),
        status_(Check(cudaMallocAsync(reinterpret_cast<void**>(&ptr_), sizeof(T), s),
                      "cudaMallocAsync")) {
    if (status_.ok()) {
      status_.Update(Check(cudaMemsetAsync(ptr_, 0, sizeof(T), s), "cudaMemsetAsync"));
    }
  }
  ~Scratch() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  const absl::Status& status() const { return status_; }
  T* get() { return ptr_; }
  absl::StatusOr<T> Read() {
    T host{};
    if (auto s = Check(cudaMemcpyAsync(&host, ptr_, sizeof(T), cudaMemcpyDeviceToHost, stream_),
                       "cudaMemcpyAsync");
        !s.ok())
      return s;
    if (auto s = Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); !s.ok()) return s;
    return host;
  }

 private:
  cudaStream_t stream_;
  T* ptr_ = nullptr;
  absl::Status status_;
};

// Queues the statistics of x = g (+ r) into `st` (zeroed by the caller).
absl::Status QueueStats(const float* g, const float* r, uint32_t n, DeviceStats* st,
                        cudaStream_t s) {
  StatsKernel<<<std::min<unsigned>(Blocks(n), 1024), kThreads, 0, s>>>(g, r, n, st);
  return CheckLaunch("StatsKernel");
}

}  // namespace

bool DeviceAvailable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

absl::Status EncodeOnDeviceAsync(CodecType type, const CodecOptions& options,
                                 const float* d_grad, float* d_residual, uint32_t n,
                                 const EncodeKey& key, uint8_t* d_payload,
                                 DeviceEncodeResult* d_result, void* d_stats, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  auto* st = static_cast<DeviceStats*>(d_stats);
  switch (type) {
    case CodecType::kNone:
      EncodeF32Kernel<<<Blocks(n), kThreads, 0, s>>>(
          d_grad, d_residual, n, reinterpret_cast<float*>(d_payload), d_result);
      return CheckLaunch("EncodeF32Kernel");
    case CodecType::kTwoBit: {
      const bool adaptive = EncodeReducesStats(type, options);
      if (adaptive) GS_RETURN_IF_ERROR(QueueStats(d_grad, d_residual, n, st, s));
      EncodeTwoBitKernel<<<Blocks((n + 3) / 4), kThreads, 0, s>>>(
          d_grad, d_residual, n, options.twobit_threshold, adaptive ? st : nullptr, d_payload,
          d_result);
      return CheckLaunch("EncodeTwoBitKernel");
    }
    case CodecType::kTernary:
      GS_RETURN_IF_ERROR(QueueStats(d_grad, d_residual, n, st, s));
      EncodeTernaryKernel<<<Blocks((n + 3) / 4), kThreads, 0, s>>>(
          d_grad, d_residual, n, options.ternary_clip, st,
          ChunkPhiloxKey(key.seed, key.tensor, key.chunk), key.worker, key.clock, d_payload,
          d_result);
      return CheckLaunch("EncodeTernaryKernel");
    case CodecType::kOneBit:
      GS_RETURN_IF_ERROR(QueueStats(d_grad, d_residual, n, st, s));
      EncodeOneBitKernel<<<Blocks((n + 7) / 8), kThreads, 0, s>>>(d_grad, d_residual, n, st,
                                                                  d_payload, d_result);
      return CheckLaunch("EncodeOneBitKernel");
    case CodecType::kHalf:  // host encoders only (common/codec/README.md)
    case CodecType::kInt8:
    case CodecType::kInt4:
    case CodecType::kTernary512:
      return absl::UnimplementedError(
          absl::StrCat(CodecTypeName(type), " has no CUDA encoder"));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown codec id ", static_cast<int>(type)));
}

absl::Status EncodeOnDevice(CodecType type, const CodecOptions& options, const float* d_grad,
                            float* d_residual, uint32_t n, const EncodeKey& key,
                            uint8_t* d_payload, ChunkHeader* header, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  *header = ChunkHeader{type, n, 0.0f, 0.0f};
  if (n == 0) return absl::OkStatus();
  if (!EncodeReducesStats(type, options)) {
    // The header is known here: nothing to read back.
    if (type == CodecType::kTwoBit) header->scale = options.twobit_threshold;
    return EncodeOnDeviceAsync(type, options, d_grad, d_residual, n, key, d_payload, nullptr,
                               nullptr, stream);
  }
  struct Scratchpad {
    DeviceStats stats;
    DeviceEncodeResult result;
  };
  Scratch<Scratchpad> scratch(s);
  GS_RETURN_IF_ERROR(scratch.status());
  GS_RETURN_IF_ERROR(EncodeOnDeviceAsync(type, options, d_grad, d_residual, n, key, d_payload,
                                         &scratch.get()->result, &scratch.get()->stats, stream));
  GS_ASSIGN_OR_RETURN(const Scratchpad got, scratch.Read());
  if (got.result.non_finite) {
    return absl::InvalidArgumentError(
        absl::StrCat(CodecTypeName(type), " encode: gradient holds NaN or Inf"));
  }
  *header = got.result.header;
  return absl::OkStatus();
}

absl::Status SumPathOnDevice(const float* d_error, const float* d_signal, uint32_t n, double* d_out,
                                void* stream) {
  if (n == 0) return absl::OkStatus();
  const unsigned blocks = std::min<unsigned>(Blocks(n), 256);
  SumPathKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(d_error, d_signal, n,
                                                                          d_out);
  return CheckLaunch("SumPathKernel");
}

absl::Status DecodeAddOnDevice(const ChunkHeader& h, const uint8_t* d_payload,
                               size_t payload_bytes, float* d_acc, float weight, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  // Header-only checks first: an empty host payload view has the right size.
  if (!IsKnownCodec(h.codec)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown codec id ", static_cast<int>(h.codec)));
  }
  if (payload_bytes != PayloadBytes(h.codec, h.num_elems)) {
    return absl::InvalidArgumentError(absl::StrCat("payload of ", payload_bytes, " bytes for ",
                                                   h.num_elems, " elements, expected ",
                                                   PayloadBytes(h.codec, h.num_elems)));
  }
  const float ws = weight * h.scale, ws2 = weight * h.scale2;
  if (!std::isfinite(weight) || !std::isfinite(ws) || !std::isfinite(ws2) ||
      (h.scale < 0.0f && h.codec != CodecType::kOneBit)) {
    return absl::InvalidArgumentError("decode weight or scale is not finite");
  }
  const uint32_t n = h.num_elems;
  if (n == 0) return absl::OkStatus();
  Scratch<int> bad(s);
  if (!bad.status().ok()) return bad.status();
  switch (h.codec) {
    case CodecType::kNone:
      FiniteF32Kernel<<<Blocks(n), kThreads, 0, s>>>(reinterpret_cast<const float*>(d_payload), n,
                                                     bad.get());
      break;
    case CodecType::kTwoBit:
    case CodecType::kTernary:
      Validate2BitKernel<<<Blocks((n + 3) / 4), kThreads, 0, s>>>(d_payload, n, bad.get());
      break;
    case CodecType::kOneBit:
      ValidateOneBitKernel<<<1, 1, 0, s>>>(d_payload, n, bad.get());
      break;
    default:  // a codec with no device kernels yet (common/codec/README.md)
      return absl::UnimplementedError(absl::StrCat(CodecTypeName(h.codec), " has no CUDA decoder"));
  }
  if (auto e = CheckLaunch("validate"); !e.ok()) return e;
  auto flag = bad.Read();
  if (!flag.ok()) return flag.status();
  if (*flag) {
    return absl::InvalidArgumentError(
        absl::StrCat(CodecTypeName(h.codec),
                     " payload is malformed (invalid code, padding or non-finite value)"));
  }
  switch (h.codec) {
    case CodecType::kNone:
      DecodeAddF32Kernel<<<Blocks(n), kThreads, 0, s>>>(reinterpret_cast<const float*>(d_payload),
                                                        n, weight, d_acc);
      break;
    case CodecType::kTwoBit:
    case CodecType::kTernary:
      DecodeAdd2BitKernel<<<Blocks((n + 3) / 4), kThreads, 0, s>>>(d_payload, n, ws, d_acc);
      break;
    case CodecType::kOneBit:
      DecodeAdd1BitKernel<<<Blocks((n + 7) / 8), kThreads, 0, s>>>(d_payload, n, ws, ws2, d_acc);
      break;
    default:  // refused by the validation switch above
      break;
  }
  return CheckLaunch("decode-add");
}

}  // namespace cuda
}  // namespace gradstream
