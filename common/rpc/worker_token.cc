#include "common/rpc/worker_token.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/rpc.h"

namespace gradstream::rpc {

std::string WorkerToken(absl::string_view job_token, absl::string_view job_id, uint64_t worker,
                        uint64_t incarnation) {
  if (job_token.empty()) return "";
  const std::string message = absl::StrCat(job_id, std::string(1, '\0'), worker,
                                           std::string(1, '\0'), incarnation);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), job_token.data(), static_cast<int>(job_token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return absl::StrCat("w1.", absl::BytesToHexString(
                                 absl::string_view(reinterpret_cast<const char*>(mac), len)));
}

bool IsWorkerToken(absl::string_view presented, absl::string_view job_token,
                   absl::string_view job_id, uint64_t worker, uint64_t incarnation) {
  if (job_token.empty() || presented.empty()) return false;
  return TokensEqual(WorkerToken(job_token, job_id, worker, incarnation), presented);
}

}  // namespace gradstream::rpc
