#include "common/codec/registry.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/codec/error_feedback.h"
#include "common/codec/internal/codec_table.h"
#include "common/status.h"

namespace gradstream {

struct CodecRegistry::Impl {
  mutable absl::Mutex mu;
  std::map<std::string, CodecFactory, std::less<>> factories ABSL_GUARDED_BY(mu);
};

CodecRegistry::Impl& CodecRegistry::impl() const {
  // Function-local static: no static-initialization-order hazards.
  static Impl* const impl = new Impl;
  return *impl;
}

CodecRegistry& CodecRegistry::Global() {
  static CodecRegistry* const registry = [] {
    auto* r = new CodecRegistry;
    RegisterBuiltinCodecs(*r);
    return r;
  }();
  return *registry;
}

absl::Status CodecRegistry::Register(absl::string_view name, CodecFactory factory) {
  absl::MutexLock lock(&impl().mu);
  // Store and look up under the same key (BytePS's registry does not).
  auto [it, inserted] = impl().factories.emplace(std::string(name), std::move(factory));
  if (!inserted) return absl::AlreadyExistsError(absl::StrCat("codec '", name, "' exists"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Codec>> CodecRegistry::Create(absl::string_view name,
                                                             const CodecOptions& options) const {
  absl::MutexLock lock(&impl().mu);
  auto it = impl().factories.find(name);
  if (it == impl().factories.end()) {
    std::vector<std::string> known;
    for (const auto& [n, f] : impl().factories) known.push_back(n);
    return absl::NotFoundError(
        absl::StrCat("unknown codec '", name, "' (known: ", absl::StrJoin(known, ", "), ")"));
  }
  return it->second(options);
}

std::vector<std::string> CodecRegistry::Names() const {
  absl::MutexLock lock(&impl().mu);
  std::vector<std::string> names;
  for (const auto& [n, f] : impl().factories) names.push_back(n);
  return names;
}

void RegisterBuiltinCodecs(CodecRegistry& registry) {
  for (const internal::CodecRow& row : internal::CodecRows()) {
    // AlreadyExists on a second call is the idempotent case.
    (void)registry.Register(row.name, row.new_encoder);
  }
}

absl::StatusOr<std::unique_ptr<Codec>> MakeChunkEncoder(absl::string_view name,
                                                        const CodecOptions& options,
                                                        bool error_feedback, uint32_t num_elems) {
  GS_ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec, CodecRegistry::Global().Create(name, options));
  if (!error_feedback) return codec;
  return std::unique_ptr<Codec>(std::make_unique<ErrorFeedback>(std::move(codec), num_elems));
}

}  // namespace gradstream
