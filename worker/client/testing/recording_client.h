// A PsClient that answers every call at once and records it as "push C",
// "pull C", "clock C", "init" or "leave": the order of a worker's calls,
// without shards (trainer_test, runtime_test). Pulls listed by FailPull (by
// clock, each once) end with DATA_LOSS. Header-only: include it from a
// gtest binary linked with gs_client.
#ifndef GRADSTREAM_WORKER_CLIENT_TESTING_RECORDING_CLIENT_H_
#define GRADSTREAM_WORKER_CLIENT_TESTING_RECORDING_CLIENT_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "worker/client/internal/pending.h"
#include "worker/client/ps_client.h"

namespace gradstream::client::testing {

class RecordingClient final : public PsClient {
 public:
  PushHandle Push(uint32_t, absl::Span<const float>, uint64_t clock) override {
    Record(absl::StrCat("push ", clock));
    return PushHandle();
  }
  PushHandle PushEncoded(uint32_t, absl::Span<const EncodedChunkView>, uint64_t) override {
    ADD_FAILURE() << "PushEncoded is the device path's";
    return PushHandle();
  }
  PullHandle Pull(uint64_t clock, std::vector<absl::Span<float>>) override {
    Record(absl::StrCat("pull ", clock));
    absl::MutexLock lock(&mu_);
    for (auto it = fail_pulls_.begin(); it != fail_pulls_.end(); ++it) {
      if (*it != clock) continue;
      fail_pulls_.erase(it);
      auto state = std::make_shared<internal::PullState>(
          std::vector<internal::PullTarget>(1), std::vector<std::vector<uint64_t>>{{0}});
      state->Fail(0, absl::DataLossError("shard lost its parameters"));
      return MakePullHandle(std::move(state));
    }
    // Asks no shard: complete at once, as a real pull's handle once answered.
    return MakePullHandle(std::make_shared<internal::PullState>(
        std::vector<internal::PullTarget>(), std::vector<std::vector<uint64_t>>()));
  }
  PullHandle PullRows(uint32_t, absl::Span<const uint64_t>, uint64_t clock,
                      absl::Span<float>) override {
    Record(absl::StrCat("pull rows ", clock));
    return MakePullHandle(std::make_shared<internal::PullState>(
        std::vector<internal::PullTarget>(), std::vector<std::vector<uint64_t>>()));
  }
  PushHandle PushRows(uint32_t, absl::Span<const uint64_t>, absl::Span<const float>,
                      uint64_t clock) override {
    Record(absl::StrCat("push rows ", clock));
    return PushHandle();
  }
  absl::Status InitParams(absl::Span<const absl::Span<const float>> values,
                          absl::Duration) override {
    Record("init");
    absl::MutexLock lock(&mu_);
    init_values_.clear();
    for (absl::Span<const float> v : values) init_values_.emplace_back(v.begin(), v.end());
    return absl::OkStatus();
  }
  void Flush(uint64_t) override {}
  absl::Status AdvanceClock(uint64_t clock) override {
    Record(absl::StrCat("clock ", clock));
    return absl::OkStatus();
  }
  absl::Status Leave(absl::Duration) override {
    Record("leave");
    return absl::OkStatus();
  }
  ClientStats stats() const override { return {}; }
  double ResidualNorm() const override { return 0; }
  const ShardMap& shard_map() const override { return map_; }

  // The tensors of element counts `sizes`, as the shard map would list
  // them (StepLoop checks tensor indices against it).
  void SetTensors(const std::vector<std::pair<std::string, uint64_t>>& tensors) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      TensorInfo t;
      t.name = tensors[i].first;
      t.num_elems = tensors[i].second;
      t.index = static_cast<uint32_t>(i);
      map_.tensors.push_back(t);
    }
  }
  void FailPull(uint64_t clock) {
    absl::MutexLock lock(&mu_);
    fail_pulls_.push_back(clock);
  }
  std::vector<std::string> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  // The values of the last InitParams, one vector per tensor.
  std::vector<std::vector<float>> init_values() const {
    absl::MutexLock lock(&mu_);
    return init_values_;
  }

 private:
  void Record(std::string event) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }

  ShardMap map_;
  mutable absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> fail_pulls_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<float>> init_values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradstream::client::testing

#endif  // GRADSTREAM_WORKER_CLIENT_TESTING_RECORDING_CLIENT_H_
