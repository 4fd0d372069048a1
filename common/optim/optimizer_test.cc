#include "common/optim/optimizer.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/codec/registry.h"
#include "common/optim/internal/kernels.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

Optimizer Make(OptimizerType type, float lr, float wd = 0.0f) {
  OptimizerOptions o;
  o.type = type;
  o.learning_rate = lr;
  o.momentum = 0.9f;
  o.epsilon = type == OptimizerType::kAdam ? 1e-8f : 1e-7f;
  o.initial_accumulator = 0.1f;
  o.weight_decay = wd;
  auto opt = Optimizer::Create(o);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return *opt;
}

// Two steps of g = 0.5 on p = 1, lr = 0.1; expected values worked out by hand.
struct Case {
  OptimizerType type;
  float after1, after2;
};

TEST(Optimizer, MatchesHandComputedValues) {
  const float ada1 = 1.0f - 0.05f / std::sqrt(0.35f);  // a = 0.1 + 0.25
  const float ada2 = ada1 - 0.05f / std::sqrt(0.60f);  // a = 0.35 + 0.25
  const Case cases[] = {
      {OptimizerType::kSgd, 0.95f, 0.90f},
      {OptimizerType::kMomentum, 0.95f, 0.855f},    // v = 0.5, then 0.95
      {OptimizerType::kNesterov, 0.905f, 0.7695f},  // p -= 0.1*(0.5 + 0.9 v)
      {OptimizerType::kAdaGrad, ada1, ada2},
      {OptimizerType::kAdam, 0.9f, 0.8f},  // bias-corrected m/sqrt(v) = 1 each step
  };
  for (const Case& c : cases) {
    Optimizer opt = Make(c.type, 0.1f);
    std::vector<float> p = {1.0f};
    std::vector<float> g = {0.5f};
    OptimizerState s = opt.NewState(1);
    ASSERT_TRUE(opt.Apply(&p, g, 1.0f, &s).ok());
    EXPECT_NEAR(p[0], c.after1, 1e-6) << OptimizerTypeName(c.type);
    ASSERT_TRUE(opt.Apply(&p, g, 1.0f, &s).ok());
    EXPECT_NEAR(p[0], c.after2, 1e-6) << OptimizerTypeName(c.type);
    EXPECT_EQ(s.step, 2u);
  }
}

TEST(Optimizer, AdaGradStartsFromInitialAccumulator) {
  Optimizer opt = Make(OptimizerType::kAdaGrad, 0.1f);
  OptimizerState s = opt.NewState(3);
  ASSERT_EQ(s.slots.size(), 1u);
  for (float a : s.slots[0]) EXPECT_FLOAT_EQ(a, 0.1f);
}

TEST(Optimizer, WeightDecayAndGradScale) {
  Optimizer opt = Make(OptimizerType::kSgd, 0.1f, /*wd=*/0.1f);
  std::vector<float> p = {1.0f};
  std::vector<float> g = {1.5f};
  OptimizerState s = opt.NewState(1);
  ASSERT_TRUE(opt.Apply(&p, g, 1.0f / 3.0f, &s).ok());  // g = 0.5 + 0.1
  EXPECT_NEAR(p[0], 0.94f, 1e-6);
}

TEST(Optimizer, SizeMismatchIsInvalidArgument) {
  Optimizer opt = Make(OptimizerType::kMomentum, 0.1f);
  std::vector<float> p(4, 1.0f), g(3, 1.0f);
  OptimizerState s = opt.NewState(4);
  EXPECT_EQ(opt.Apply(&p, g, 1.0f, &s).code(), absl::StatusCode::kInvalidArgument);
  for (float v : p) EXPECT_EQ(v, 1.0f);
}

TEST(Optimizer, RejectsBadHyperParameters) {
  OptimizerOptions o;
  o.learning_rate = std::nanf("");
  EXPECT_FALSE(Optimizer::Create(o).ok());
  EXPECT_FALSE(OptimizerTypeFromName("rmsprop").ok());
  EXPECT_EQ(*OptimizerTypeFromName(""), OptimizerType::kMomentum);
}

TEST(OptimizerFused, TwoBitDecodeMatchesHandValues) {
  Optimizer opt = Make(OptimizerType::kSgd, 0.1f);
  ChunkHeader h;
  h.codec = CodecType::kTwoBit;
  h.num_elems = 4;
  h.scale = 0.5f;
  const std::string payload(1, static_cast<char>(0x49));  // +1, -1, 0, +1
  std::vector<float> p(4, 0.0f);
  OptimizerState s = opt.NewState(4);
  ASSERT_TRUE(opt.ApplyEncoded(h, payload, 2.0f, &p, &s).ok());
  EXPECT_FLOAT_EQ(p[0], -0.1f);
  EXPECT_FLOAT_EQ(p[1], 0.1f);
  EXPECT_FLOAT_EQ(p[2], 0.0f);
  EXPECT_FLOAT_EQ(p[3], -0.1f);
}

TEST(OptimizerFused, InvalidCodeLeavesParamsAndStateUnchanged) {
  Optimizer opt = Make(OptimizerType::kAdaGrad, 0.1f);
  ChunkHeader h;
  h.codec = CodecType::kTwoBit;
  h.num_elems = 4;
  h.scale = 0.5f;
  const std::string payload(1, static_cast<char>(0x03));  // code 11
  std::vector<float> p(4, 1.0f);
  OptimizerState s = opt.NewState(4);
  EXPECT_EQ(opt.ApplyEncoded(h, payload, 1.0f, &p, &s).code(),
            absl::StatusCode::kInvalidArgument);
  for (float v : p) EXPECT_EQ(v, 1.0f);
  for (float a : s.slots[0]) EXPECT_EQ(a, 0.1f);
  EXPECT_EQ(s.step, 0u);
  h.scale = std::nanf("");
  const std::string ok_payload(1, 0);
  EXPECT_FALSE(opt.ApplyEncoded(h, ok_payload, 1.0f, &p, &s).ok());
}

// The fused path (both kernel builds) equals DecodeAdd + Apply, for every type.
TEST(OptimizerFused, MatchesDecodeThenApply) {
  const uint32_t n = 5003;  // not a multiple of the block or of 4
  std::mt19937 rng(7);
  std::string payload((n + 3) / 4, 0);
  for (auto& b : payload) {
    uint8_t v = 0;
    for (int k = 0; k < 4; ++k) v |= static_cast<uint8_t>(rng() % 3) << (2 * k);
    b = static_cast<char>(v);
  }
  // Trailing codes past n must be zero for a valid chunk.
  payload.back() = static_cast<char>(static_cast<uint8_t>(payload.back()) &
                                     ((1u << (2 * (n % 4 == 0 ? 4 : n % 4))) - 1));
  ChunkHeader h;
  h.codec = CodecType::kTwoBit;
  h.num_elems = n;
  h.scale = 0.37f;
  std::vector<float> init(n);
  for (auto& v : init) v = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
  for (int t = 0; t <= 4; ++t) {
    Optimizer opt = Make(static_cast<OptimizerType>(t), 0.05f, 0.01f);
    std::vector<float> a = init, b = init;
    OptimizerState sa = opt.NewState(n), sb = opt.NewState(n);
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(opt.ApplyEncoded(h, payload, 0.5f, &a, &sa).ok());
      std::vector<float> dense(n, 0.0f);
      ASSERT_TRUE(DecodeAdd(h, payload, absl::MakeSpan(dense), 1.0f).ok());
      ASSERT_TRUE(opt.Apply(&b, dense, 0.5f, &sb).ok());
    }
    for (uint32_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], 1e-6f * (1 + std::abs(b[i])));
  }
}

// Every codec's chunk through the fused path equals DecodeAdd + Apply to the
// bit (weight 0.5 scales exactly), including a misaligned raw payload.
TEST(OptimizerFused, EveryCodecMatchesDecodeThenApply) {
  const uint32_t n = 3001;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> g(n), init(n);
  for (auto& v : g) v = dist(rng);
  for (auto& v : init) v = dist(rng);
  for (const char* name : {"none", "twobit", "ternary", "onebit", "ternary512"}) {
    auto enc = MakeChunkEncoder(name, {}, /*error_feedback=*/false, n);
    ASSERT_TRUE(enc.ok());
    ChunkHeader h;
    std::string payload;
    ASSERT_TRUE((*enc)->Encode(g, {.seed = 3}, &h, &payload).ok());
    for (bool misaligned : {false, true}) {
      const std::string buffer = (misaligned ? std::string(1, 'x') : std::string()) + payload;
      const absl::string_view view = absl::string_view(buffer).substr(misaligned ? 1 : 0);
      Optimizer opt = Make(OptimizerType::kAdam, 0.05f, 0.01f);
      std::vector<float> a = init, b = init;
      OptimizerState sa = opt.NewState(n), sb = opt.NewState(n);
      for (int step = 0; step < 2; ++step) {
        ASSERT_TRUE(opt.ApplyEncoded(h, view, 0.5f, &a, &sa).ok());
        std::vector<float> dense(n, 0.0f);
        ASSERT_TRUE(DecodeAdd(h, view, absl::MakeSpan(dense), 1.0f).ok());
        ASSERT_TRUE(opt.Apply(&b, dense, 0.5f, &sb).ok());
      }
      EXPECT_EQ(a, b) << name << (misaligned ? " misaligned" : "");
      EXPECT_EQ(sa.slots, sb.slots) << name;
    }
  }
}

// The fused path validates exactly as DecodeAdd does (one ChunkDecoder),
// including the weight-overflow rule it once lacked.
TEST(OptimizerFused, RejectsWhatDecodeAddRejects) {
  Optimizer opt = Make(OptimizerType::kMomentum, 0.1f);
  struct BadChunk {
    const char* what;
    ChunkHeader h;
    std::string payload;
    float weight;
  };
  const float nan_value[2] = {1.0f, std::nanf("")};
  const BadChunk cases[] = {
      {"weight overflow", {CodecType::kTwoBit, 4, 1e30f, 0}, std::string(1, '\x01'), 1e10f},
      {"onebit weight overflow", {CodecType::kOneBit, 8, 1.0f, -3e38f}, std::string(1, '\x01'),
       4.0f},
      {"NaN in fp32", {CodecType::kNone, 2, 0, 0},
       std::string(reinterpret_cast<const char*>(nan_value), 8), 1.0f},
      {"onebit padding", {CodecType::kOneBit, 3, 1.0f, -1.0f}, std::string(1, '\x81'), 1.0f},
      {"unknown codec", {static_cast<CodecType>(9), 4, 1.0f, 0}, std::string(1, 0), 1.0f},
      {"short payload", {CodecType::kTernary, 8, 1.0f, 0}, std::string(1, 0), 1.0f},
      {"NaN weight", {CodecType::kTwoBit, 4, 1.0f, 0}, std::string(1, 0), std::nanf("")},
  };
  for (const BadChunk& c : cases) {
    const uint32_t n = c.h.num_elems;
    std::vector<float> p(n, 1.0f), acc(n, 1.0f);
    OptimizerState s = opt.NewState(n);
    EXPECT_EQ(DecodeAdd(c.h, c.payload, absl::MakeSpan(acc), c.weight).code(),
              absl::StatusCode::kInvalidArgument)
        << c.what;
    EXPECT_EQ(opt.ApplyEncoded(c.h, c.payload, c.weight, &p, &s).code(),
              absl::StatusCode::kInvalidArgument)
        << c.what;
    EXPECT_EQ(p, std::vector<float>(n, 1.0f)) << c.what;
    EXPECT_EQ(s.slots[0], std::vector<float>(n, 0.0f)) << c.what;
    EXPECT_EQ(s.step, 0u) << c.what;
  }
}

TEST(OptimizerKernels, PortableAndDispatchedAgree) {
  const size_t n = 3001;
  std::vector<float> g(n), p0(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = std::sin(static_cast<float>(i));
    p0[i] = std::cos(static_cast<float>(i));
  }
  for (int t = 0; t <= 4; ++t) {
    optim_internal::StepParams sp;
    sp.type = t;
    sp.lr = 0.01f;
    sp.mu = 0.9f;
    sp.eps = 1e-7f;
    sp.b1 = 0.9f;
    sp.b2 = 0.999f;
    sp.inv_bc1 = 10.0f;
    sp.inv_bc2 = 1000.0f;
    std::vector<float> pa = p0, pb = p0, a0(n, 0.1f), a1(n, 0.1f), b0(n, 0.1f), b1(n, 0.1f);
    optim_internal::PortableKernels().apply(sp, pa.data(), a0.data(), a1.data(), g.data(), 1.0f,
                                            n);
    optim_internal::Dispatch().apply(sp, pb.data(), b0.data(), b1.data(), g.data(), 1.0f, n);
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(pa[i], pb[i], 1e-6f) << t;
    // The checked (out-of-place) kernels compute exactly the in-place ones.
    const std::vector<float> s(n, 0.1f);
    for (const auto* k : {&optim_internal::PortableKernels(), &optim_internal::Dispatch()}) {
      std::vector<float> po(n), s0o(n), s1o(n);
      ASSERT_TRUE(k->apply_checked(sp, p0.data(), s.data(), s.data(), g.data(), 1.0f, po.data(),
                                   s0o.data(), s1o.data(), n));
      std::vector<float> pi = p0, s0i = s, s1i = s;
      k->apply(sp, pi.data(), s0i.data(), s1i.data(), g.data(), 1.0f, n);
      ASSERT_EQ(po, pi) << t;
    }
  }
}

// See [finite apply]: a huge scale with every code +1 is a valid chunk whose
// updates overflow after a few pushes; the one that would is refused and
// leaves params and state (step included) exactly as they were.
TEST(OptimizerFinite, AnUpdateThatWouldOverflowIsRefusedAndChangesNothing) {
  for (OptimizerType type : {OptimizerType::kSgd, OptimizerType::kMomentum,
                             OptimizerType::kNesterov, OptimizerType::kAdaGrad,
                             OptimizerType::kAdam}) {
    OptimizerOptions o;
    o.type = type;
    o.learning_rate = 1.0f;
    const Optimizer opt = *Optimizer::Create(o);
    const size_t n = 2500;  // spans blocks, the last one partial
    std::vector<float> p(n, 0.5f);
    OptimizerState s = opt.NewState(n);
    ChunkHeader h;
    h.codec = CodecType::kTwoBit;
    h.num_elems = static_cast<uint32_t>(n);
    h.scale = std::numeric_limits<float>::max();
    const std::string payload((n + 3) / 4, static_cast<char>(0x55));  // every code +1
    absl::Status status;
    int applied = 0;
    for (; applied < 100; ++applied) {
      const std::vector<float> p_before = p;
      const OptimizerState s_before = s;
      status = opt.ApplyEncoded(h, payload, 1.0f, &p, &s);
      if (!status.ok()) {
        EXPECT_EQ(p, p_before) << OptimizerTypeName(type);
        EXPECT_EQ(s.slots, s_before.slots) << OptimizerTypeName(type);
        EXPECT_EQ(s.step, s_before.step) << OptimizerTypeName(type);
        break;
      }
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << OptimizerTypeName(type);
    EXPECT_TRUE(absl::StrContains(status.message(), "non-finite")) << status;
    for (float x : p) ASSERT_TRUE(std::isfinite(x)) << OptimizerTypeName(type);
    for (const auto& slot : s.slots) {
      for (float x : slot) ASSERT_TRUE(std::isfinite(x)) << OptimizerTypeName(type);
    }
    // The dense path checks the same way.
    const std::vector<float> huge(n, std::numeric_limits<float>::max());
    const std::vector<float> p_before = p;
    for (int i = 0; i < 100 && opt.Apply(&p, huge, 1.0f, &s).ok(); ++i) {
    }
    for (float x : p) ASSERT_TRUE(std::isfinite(x)) << OptimizerTypeName(type);
  }
}

// A lazy row step is the dense step restricted to the rows it names: row 1
// is skipped in step 2, so its moments and accumulator stay as step 1 left
// them, and the other rows match a dense run of their own values.
TEST(OptimizerRows, EachRowMatchesTheDenseStepAndUntouchedRowsStay) {
  constexpr uint32_t kDim = 3;
  for (OptimizerType type : {OptimizerType::kSgd, OptimizerType::kMomentum,
                             OptimizerType::kNesterov, OptimizerType::kAdaGrad,
                             OptimizerType::kAdam}) {
    Optimizer opt = Make(type, 0.1f, 0.01f);
    const int slots = NumStateSlots(type);
    std::vector<std::vector<float>> p = {{1, 2, 3}, {-1, 0.5f, 2}, {0.25f, -3, 1}};
    std::vector<std::vector<std::vector<float>>> st(
        3, std::vector<std::vector<float>>(slots, std::vector<float>(kDim)));
    for (auto& row : st) row = opt.NewState(kDim).slots;
    std::vector<std::vector<float>> dense = p;
    std::vector<OptimizerState> dense_state(3, opt.NewState(kDim));
    OptimizerState table;
    auto step = [&](std::vector<int> rows, std::vector<float> g) {
      std::vector<float*> pp, s0, s1;
      for (int r : rows) {
        pp.push_back(p[r].data());
        if (slots > 0) s0.push_back(st[r][0].data());
        if (slots > 1) s1.push_back(st[r][1].data());
      }
      ASSERT_TRUE(opt.ApplyRows(pp, s0, s1, kDim, g, 0.5f, &table).ok());
      // The table's step counts steps, not a row's touches (torch's SparseAdam).
      for (size_t i = 0; i < rows.size(); ++i) {
        OptimizerState& d = dense_state[rows[i]];
        d.step = table.step - 1;
        ASSERT_TRUE(opt.Apply(&dense[rows[i]],
                              absl::MakeConstSpan(g.data() + i * kDim, kDim), 0.5f, &d)
                        .ok());
      }
    };
    step({0, 1, 2}, {1, -2, 0.5f, 3, 1, -1, 0.2f, 0.2f, 0.2f});
    const std::vector<float> row1 = p[1];
    step({2, 0}, {-1, 1, 2, 0.5f, 0.5f, 0.5f});
    EXPECT_EQ(table.step, 2u);
    EXPECT_EQ(p[1], row1) << OptimizerTypeName(type);
    for (int r = 0; r < 3; ++r) {
      for (uint32_t j = 0; j < kDim; ++j) {
        EXPECT_FLOAT_EQ(p[r][j], dense[r][j]) << OptimizerTypeName(type) << " row " << r;
      }
    }
  }
}

TEST(OptimizerRows, AnUpdateThatWouldOverflowChangesNoRow) {
  Optimizer opt = Make(OptimizerType::kSgd, 1.0f);
  std::vector<float> a = {1, 2}, b = {3.0e38f, 0};
  const std::vector<float> a0 = a, b0 = b;
  OptimizerState table;
  std::vector<float*> rows = {a.data(), b.data()};
  const std::vector<float> g = {1, 1, -3.0e38f, 0};  // b[0] -> 6e38: not finite
  EXPECT_EQ(opt.ApplyRows(rows, {}, {}, 2, g, 1.0f, &table).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a, a0);
  EXPECT_EQ(b, b0);
  EXPECT_EQ(table.step, 0u);
  EXPECT_EQ(opt.ApplyRows(rows, {}, {}, 3, g, 1.0f, &table).code(),
            absl::StatusCode::kInvalidArgument);  // 4 gradient floats for 2 rows of 3
}

}  // namespace
}  // namespace gradstream
