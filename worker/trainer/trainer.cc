#include "worker/trainer/trainer.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "glog/logging.h"
#include "worker/runtime/data_split.h"

namespace gradstream {

Trainer::Trainer(const TrainSetup* setup, Model* model, client::PsClient* client,
                 const runtime::AssignmentFeed* feed, runtime::ProgressBoard* board,
                 TrainerOptions options)
    : setup_(setup),
      model_(model),
      client_(client),
      feed_(feed),
      board_(board),
      options_(options),
      job_id_(feed->Get().job_id) {
  if (model_->device() == Device::kGpu) {
    for (const TensorSpec& t : model_->params()) {
      host_params_.emplace_back(t.num_elems);
      // The device path never brings fp32 gradients to the host.
      if (!options_.device_encode) host_grads_.emplace_back(t.num_elems);
    }
  }
}

absl::Status Trainer::Reshard(uint32_t rank, uint32_t world_size) {
  // The members' shares are runtime::SplitPass's (the package's rule) over
  // the dataset in its stored order, each rank's share taken whole; the
  // iterator then reshuffles within it every epoch.
  const int64_t n = setup_->data.train.num_examples();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  GS_ASSIGN_OR_RETURN(
      std::vector<std::vector<int64_t>> share,
      runtime::SplitPass(order, rank, world_size,
                         runtime::BatchSize{.per_worker = std::max<int64_t>(1, n)}));
  if (share.empty()) return absl::FailedPreconditionError("the training set is empty");
  GS_ASSIGN_OR_RETURN(batches_,
                      MinibatchIterator::Create(&setup_->data.train, std::move(share[0]),
                                                setup_->batch_size, setup_->seed,
                                                static_cast<int>(rank)));
  rank_ = rank;
  world_size_ = world_size;
  LOG(INFO) << "job " << job_id_ << ": rank " << rank << " of " << world_size;
  return absl::OkStatus();
}

absl::Status Trainer::InitParams(uint64_t start_clock) {
  std::vector<std::vector<float>> values(model_->num_tensors());
  std::vector<absl::Span<const float>> spans;
  for (int i = 0; i < model_->num_tensors(); ++i) {
    values[i].resize(model_->params()[i].num_elems);
    GS_RETURN_IF_ERROR(model_->GetParam(i, std::span<float>(values[i])));
    spans.emplace_back(values[i]);
  }
  return session_->Init(feed_->Get().rank, start_clock, spans, options_.loop.push_wait);
}

std::vector<absl::Span<float>> Trainer::PullTargets() {
  std::vector<absl::Span<float>> out;
  for (int i = 0; i < model_->num_tensors(); ++i) {
    const size_t n = model_->params()[i].num_elems;
    out.emplace_back(model_->device() == Device::kCpu ? model_->param_data(i)
                                                      : host_params_[i].data(),
                     n);
  }
  return out;
}

absl::Status Trainer::PullInto(uint64_t clock) {
  // The pull Step asked for is waited on; any other is asked now. Waits,
  // re-initialization after DATA_LOSS and giving up are the loop's (see
  // [step loop] in worker/client/step_loop.h).
  session_->loop().StartPull(clock, PullTargets());
  GS_RETURN_IF_ERROR(session_->loop().WaitTensors({}));
  if (model_->device() == Device::kGpu) {
    for (int i = 0; i < model_->num_tensors(); ++i) {
      GS_RETURN_IF_ERROR(model_->SetParam(i, host_params_[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::CheckActive() const {
  if (Stopping()) return absl::CancelledError("stopping (signal)");
  if (!Active(feed_->Get())) return absl::CancelledError("job is no longer active");
  return absl::OkStatus();
}

absl::Status Trainer::Step(uint64_t clock) {
  const Batch& batch = batches_->Next();
  std::vector<int> enqueued;  // the device path's tensors, in push order
  absl::Status push_status;
  // Push each tensor the moment backward has produced its gradient, so
  // encoding and the network overlap the rest of backward (see [grad ready]).
  model_->set_grad_ready_callback([&](int t) {
    if (pusher_ != nullptr) {
      // Queued on the model's stream; GPU time is counted in Finish().
      push_status.Update(pusher_->Enqueue(t, clock));
      enqueued.push_back(t);
      return;
    }
    // The gradient stays in the model (or host_grads_) until the next
    // backward, past EndClock, as the loop's encode thread needs it.
    if (model_->device() == Device::kCpu) {
      push_status.Update(session_->loop().Push(
          t, absl::MakeConstSpan(model_->grad_data(t), model_->params()[t].num_elems), clock));
      return;
    }
    // Wait for backward first (GetGrad would), so that what is timed is the
    // copy, not the layer's backward.
    push_status.Update(model_->Synchronize());
    const absl::Time start = absl::Now();  // measures work: the real clock ([env time])
    if (absl::Status s = model_->GetGrad(t, host_grads_[t]); s.ok()) {
      // The host path of a GPU model: copy the fp32 gradient, encode on the
      // loop's encode thread.
      push_status.Update(session_->loop().Push(t, host_grads_[t], clock));
    } else {
      push_status.Update(s);
    }
    encode_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
  });
  StepStats stats;
  absl::Status fb = model_->ForwardBackward(batch.x.data(), batch.y.data(), batch.size, &stats);
  model_->set_grad_ready_callback(nullptr);
  if (pusher_ != nullptr) {
    // Whatever was enqueued is waited for, even after an error, so no push
    // thread work outlives the step.
    absl::StatusOr<std::vector<client::PushHandle>> handles = pusher_->Finish(&encode_seconds_);
    if (handles.ok() && handles->size() == enqueued.size()) {
      for (size_t i = 0; i < enqueued.size(); ++i) {
        session_->loop().AddPush(static_cast<uint32_t>(enqueued[i]), (*handles)[i]);
      }
    } else {
      push_status.Update(handles.ok() ? absl::InternalError("device pusher: one handle per push")
                                      : handles.status());
    }
  }
  GS_RETURN_IF_ERROR(fb);
  GS_RETURN_IF_ERROR(push_status);
  // Every push of this clock is on its way: ask for the next clock's
  // parameters now, so that the answers come back while the pushes still go
  // out and a step costs about max(push, pull) rather than their sum. See
  // [overlapped pull] in worker/client/ps_client.h: the client sends the
  // pull behind the pushes it must follow, so the shard answers it under the
  // rule a pull sent after the acks would meet (sync: once round `clock`
  // closed; SSP/async: once the staleness bound holds for clock + 1), with
  // this worker's own pushes in it. The pull writes into the parameters,
  // which nothing reads before PullInto waits on it -- except an evaluation
  // after this clock, so none then; nor when the loop will not pull
  // clock + 1 (the last step, a leave, a stop).
  std::optional<std::vector<absl::Span<float>>> next;
  if (!EvaluatesAfter(clock) && WillPull(clock + 1)) next = PullTargets();
  GS_RETURN_IF_ERROR(session_->loop().EndClock(clock, std::move(next)));

  session_->meter().AddStep(stats.loss, static_cast<uint64_t>(batch.size));
  return absl::OkStatus();
}

bool Trainer::WillPull(uint64_t clock) const {
  const runtime::Assignment a = feed_->Get();
  return clock < setup_->steps && Active(a) && !Stopping() && !runtime::LeavesAt(a, clock);
}

bool Trainer::EvaluatesAfter(uint64_t clock) const {
  return rank_ == 0 && setup_->eval_every > 0 && (clock + 1) % setup_->eval_every == 0 &&
         clock + 1 < setup_->steps;
}

absl::Status Trainer::Evaluate(uint64_t clock) {
  EvalStats eval;
  GS_RETURN_IF_ERROR(model_->Evaluate(setup_->data.test, &eval));
  session_->meter().SetAccuracy(static_cast<float>(eval.accuracy), clock);
  LOG(INFO) << "job " << job_id_ << " clock " << clock << ": test accuracy " << eval.accuracy
            << ", test loss " << eval.loss;
  return absl::OkStatus();
}

void Trainer::Publish(uint64_t clock) {
  bool new_window = false;
  runtime::Progress p = session_->ProgressAt(clock, &new_window);
  p.job_id = job_id_;
  p.rank = rank_;
  p.world_size = world_size_;
  const double encode_seconds = encode_seconds_ + session_->loop().encode_seconds();
  p.encode_share = step_seconds_ > 0 ? static_cast<float>(encode_seconds / step_seconds_) : 0.0f;
  // The norm is a pass over every residual (on the GPU for the device
  // path): once per rate window, not per step.
  if (new_window || clock == setup_->steps) {
    if (pusher_ == nullptr) {
      residual_norm_ = client_->ResidualNorm();
    } else if (absl::StatusOr<double> norm = pusher_->ResidualNorm(); norm.ok()) {
      residual_norm_ = *norm;
    }
  }
  p.residual_norm = residual_norm_;
  board_->Set(p);
}

absl::StatusOr<TrainOutcome> Trainer::Run(uint64_t start_clock) {
  runtime::SessionOptions so;
  so.loop = options_.loop;
  so.initial_values = runtime::InitialValues::kSameOnEveryWorker;
  so.check = [this] { return CheckActive(); };
  // Not the evaluations' clocks: the StartPull after one takes the early
  // pull up.
  so.will_pull = [this](uint64_t clock) { return WillPull(clock); };
  session_ = std::make_unique<runtime::WorkerSession>(client_, std::move(so));
  // However Run ends, the pull in flight is abandoned: nothing writes into
  // the model after Run returns.
  absl::Cleanup drop_session = [this] { session_.reset(); };
  session_->meter().SetEncodePath(options_.device_encode            ? "device"
                                  : model_->device() == Device::kGpu ? "host-from-cuda"
                                                                     : "host");
  if (options_.device_encode && pusher_ == nullptr) {
    internal::DevicePusherOptions popt;
    popt.seed = setup_->seed;
    popt.worker_id = options_.worker_id;
    popt.codec = setup_->codec;
    popt.wait = options_.loop.push_wait;
    GS_ASSIGN_OR_RETURN(pusher_, internal::DevicePusher::Create(model_, client_, popt));
  }
  GS_RETURN_IF_ERROR(InitParams(start_clock));
  uint64_t clock = start_clock;
  Publish(clock);
  for (;; ++clock) {
    const runtime::Assignment a = feed_->Get();
    if (!Active(a)) return TrainOutcome::kStopped;
    if (clock >= setup_->steps) break;
    if (Stopping()) {
      // See [graceful stop] in trainer.h.
      GS_RETURN_IF_ERROR(session_->Leave(options_.loop.push_wait));
      LOG(INFO) << "job " << job_id_ << ": stopping on a signal, left after clock " << clock;
      return TrainOutcome::kLeft;
    }
    if (runtime::LeavesAt(a, clock)) {
      GS_RETURN_IF_ERROR(session_->Leave(options_.loop.push_wait));
      LOG(INFO) << "job " << job_id_ << ": left after clock " << clock;
      return TrainOutcome::kLeft;
    }
    // A new rank or world size holds from the epoch's clock on; before it,
    // the old data shard stays (the round in flight counts the old members).
    if (batches_ == nullptr ||
        (clock >= a.epoch_clock && (a.rank != rank_ || a.world_size != world_size_))) {
      GS_RETURN_IF_ERROR(Reshard(a.rank, a.world_size));
    }
    const absl::Time step_start = absl::Now();
    absl::Status s = PullInto(clock);
    if (absl::IsCancelled(s) && Stopping()) continue;  // leaves at the top of the loop
    if (absl::IsCancelled(s)) return TrainOutcome::kStopped;
    GS_RETURN_IF_ERROR(s);
    GS_RETURN_IF_ERROR(Step(clock));
    step_seconds_ += absl::ToDoubleSeconds(absl::Now() - step_start);
    if (EvaluatesAfter(clock)) {
      GS_RETURN_IF_ERROR(Evaluate(clock + 1));
    }
    Publish(clock + 1);
  }
  // Every member reads the final parameters once every member is done,
  // evaluates and reports the accuracy: all get the same parameters and the
  // same figure, so the job's accuracy does not depend on one process
  // living through its report (a member killed between its final
  // evaluation and its report leaves the others' figure).
  {
    absl::Status s = PullInto(setup_->steps + options_.final_pull_slack);
    if (absl::IsCancelled(s)) return TrainOutcome::kStopped;
    GS_RETURN_IF_ERROR(s);
    GS_RETURN_IF_ERROR(Evaluate(setup_->steps));
  }
  Publish(setup_->steps);
  GS_RETURN_IF_ERROR(session_->Leave(options_.loop.push_wait));
  return TrainOutcome::kDone;
}

}  // namespace gradstream
