// The sums a PrecisionController observes for one path, over the path's
// values in one pass ([error sums] in path_sums.cc).
#ifndef GRADSTREAM_COMMON_JOB_PATH_SUMS_H_
#define GRADSTREAM_COMMON_JOB_PATH_SUMS_H_

#include <cstddef>

namespace gradstream {

struct PathSums {
  double error2 = 0, signal2 = 0, value2 = 0, dot = 0;
};

// Over n elements, error = a - b, signal = c - d and value = a (a null b or
// d reads as zeros): |error|^2, |signal|^2, |value|^2 and error . signal.
// Then `keep` (nullable; may be d) = a.
PathSums SumPath(const float* a, const float* b, const float* c, const float* d, float* keep,
                 size_t n);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_PATH_SUMS_H_
