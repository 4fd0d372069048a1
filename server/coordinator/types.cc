// See types.h.
#include "server/coordinator/types.h"

#include <bit>
#include <type_traits>

namespace gradstream::coordinator {

namespace {

// Bit for bit, as the serialized form compares: a NaN loss equals itself.
template <typename T>
bool Same(T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
  } else if constexpr (std::is_same_v<T, double>) {
    return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
  } else {
    return a == b;
  }
}

template <typename T>
bool Same(const std::optional<T>& a, const std::optional<T>& b) {
  return a.has_value() == b.has_value() && (!a.has_value() || Same(*a, *b));
}

}  // namespace

bool IsTerminal(JobState state) {
  return state == JobState::kCompleted || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kUnspecified:
      return "JOB_STATE_UNSPECIFIED";
    case JobState::kPending:
      return "PENDING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kCompleted:
      return "COMPLETED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
  }
  return "";
}

bool JobProgress::operator==(const JobProgress& o) const {
  return clock == o.clock && max_clock == o.max_clock && Same(loss, o.loss) &&
         Same(accuracy, o.accuracy) && accuracy_clock == o.accuracy_clock &&
         Same(samples_per_sec, o.samples_per_sec) && bytes_pushed == o.bytes_pushed &&
         fp32_bytes_pushed == o.fp32_bytes_pushed && Same(compression_ratio, o.compression_ratio) &&
         max_staleness == o.max_staleness && Same(residual_norm, o.residual_norm) &&
         bytes_pulled == o.bytes_pulled && fp32_bytes_pulled == o.fp32_bytes_pulled &&
         bytes_pulled_discarded == o.bytes_pulled_discarded &&
         Same(stalled_seconds, o.stalled_seconds) && checkpoint_failures == o.checkpoint_failures &&
         checkpoint_error == o.checkpoint_error && samples == o.samples &&
         Same(eta_seconds, o.eta_seconds);
}

}  // namespace gradstream::coordinator
