#include "worker/runtime/progress.h"

#include <utility>

#include "common/job/precision_proto.h"

namespace gradstream::runtime {

v1::WorkerProgress ProgressToProto(const Progress& p) {
  v1::WorkerProgress out;
  out.set_clock(p.clock);
  out.set_loss(p.loss);
  out.set_accuracy(p.accuracy);
  out.set_accuracy_clock(p.accuracy_clock);
  out.set_samples_per_sec(p.samples_per_sec);
  out.set_bytes_pushed(p.bytes_pushed);
  out.set_fp32_bytes_pushed(p.fp32_bytes_pushed);
  out.set_bytes_pulled(p.bytes_pulled);
  out.set_fp32_bytes_pulled(p.fp32_bytes_pulled);
  out.set_bytes_pulled_discarded(p.bytes_pulled_discarded);
  out.set_residual_norm(p.residual_norm);
  out.set_encode_path(p.encode_path);
  out.set_encode_share(p.encode_share);
  if (p.push_link.has_value()) LinkDecisionToProto(*p.push_link, out.mutable_push_link());
  out.set_wait_share(p.wait_share);
  return out;
}

void MergeProgress(const v1::WorkerProgress& in, Progress* p) {
  p->clock = in.clock();
  p->loss = in.loss();
  if (in.accuracy_clock() > 0) {
    p->accuracy = in.accuracy();
    p->accuracy_clock = in.accuracy_clock();
  }
  p->samples_per_sec = in.samples_per_sec();
  p->bytes_pushed = in.bytes_pushed();
  p->fp32_bytes_pushed = in.fp32_bytes_pushed();
  p->bytes_pulled = in.bytes_pulled();
  p->fp32_bytes_pulled = in.fp32_bytes_pulled();
  p->bytes_pulled_discarded = in.bytes_pulled_discarded();
  p->residual_norm = in.residual_norm();
  p->encode_path = in.encode_path();
  p->encode_share = in.encode_share();
  p->push_link.reset();
  if (in.has_push_link()) p->push_link = LinkDecisionFromProto(in.push_link());
  p->wait_share = in.wait_share();
}

void ProgressBoard::Set(const Progress& p) {
  absl::MutexLock lock(&mu_);
  progress_ = p;
}

Progress ProgressBoard::Get() const {
  absl::MutexLock lock(&mu_);
  return progress_;
}

ProgressMeter::ProgressMeter(Env* env) : env_(env), window_start_(env->Now()) {}

void ProgressMeter::AddStep(std::optional<double> loss, uint64_t samples) {
  absl::MutexLock lock(&mu_);
  if (loss.has_value()) {
    loss_ema_ = loss_ema_.has_value() ? 0.9 * *loss_ema_ + 0.1 * *loss : *loss;
  }
  window_samples_ += samples;
}

void ProgressMeter::SetAccuracy(float accuracy, uint64_t clock) {
  absl::MutexLock lock(&mu_);
  progress_.accuracy = accuracy;
  progress_.accuracy_clock = clock;
}

void ProgressMeter::SetEncodePath(std::string path) {
  absl::MutexLock lock(&mu_);
  progress_.encode_path = std::move(path);
}

Progress ProgressMeter::At(uint64_t clock, const client::ClientStats* stats, bool* new_window) {
  absl::MutexLock lock(&mu_);
  progress_.clock = clock;
  progress_.loss = static_cast<float>(loss_ema_.value_or(0.0));
  const absl::Time now = env_->Now();
  const double secs = absl::ToDoubleSeconds(now - window_start_);
  const bool closed = secs >= 1.0;
  if (closed) {
    progress_.samples_per_sec = static_cast<float>(window_samples_ / secs);
    window_start_ = now;
    window_samples_ = 0;
  }
  if (new_window != nullptr) *new_window = closed;
  if (stats != nullptr) {
    progress_.bytes_pushed = stats->bytes_pushed;
    progress_.fp32_bytes_pushed = stats->fp32_bytes_pushed;
    progress_.bytes_pulled = stats->bytes_pulled;
    progress_.fp32_bytes_pulled = stats->fp32_bytes_pulled;
    progress_.bytes_pulled_discarded = stats->bytes_pulled_discarded;
    progress_.reconnects = stats->reconnects;
    progress_.push_link = stats->push_link;
  }
  return progress_;
}

}  // namespace gradstream::runtime
