// The C++ PsClient behind a libgradstream_c session, for C++ code linked
// with the library's objects (gradstream_c_obj) rather than loading the .so:
// bench/torch_step/cpp_step.cc times a step made directly on it against the
// same step made through the Python package. Not exported from
// libgradstream_c.so (its version script exports gs_* only).
#ifndef GRADSTREAM_WORKER_CAPI_INTERNAL_SESSION_H_
#define GRADSTREAM_WORKER_CAPI_INTERNAL_SESSION_H_

#include "worker/capi/gradstream_c.h"
#include "worker/client/ps_client.h"

namespace gradstream::capi {

// The session's client; null until gs_declare succeeded. Owned by `s`.
client::PsClient* SessionClient(gs_session* s);

}  // namespace gradstream::capi

#endif  // GRADSTREAM_WORKER_CAPI_INTERNAL_SESSION_H_
