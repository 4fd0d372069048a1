// Codec registry: maps a codec name to a factory of per-chunk encoders.
//
// Built-ins are registered explicitly by RegisterBuiltinCodecs() (called by
// Global() itself) so the linker cannot drop them. Thread-safe.
#ifndef GRADSTREAM_COMMON_CODEC_REGISTRY_H_
#define GRADSTREAM_COMMON_CODEC_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/codec/codec.h"

namespace gradstream {

using CodecFactory = std::function<std::unique_ptr<Codec>(const CodecOptions&)>;

class CodecRegistry {
 public:
  // The process-wide registry with the built-in codecs registered.
  static CodecRegistry& Global();

  // AlreadyExists when `name` is taken.
  [[nodiscard]] absl::Status Register(absl::string_view name, CodecFactory factory);

  // NotFound (naming the known codecs) for an unknown name.
  absl::StatusOr<std::unique_ptr<Codec>> Create(absl::string_view name,
                                                const CodecOptions& options) const;

  std::vector<std::string> Names() const;

 private:
  CodecRegistry() = default;
  struct Impl;
  Impl& impl() const;
};

// Registers every codec of the codec table (none/twobit/ternary/onebit).
// Idempotent.
void RegisterBuiltinCodecs(CodecRegistry& registry);

// Per-chunk encoder as a job's policy asks for it: the named codec, wrapped in
// ErrorFeedback when `error_feedback` is set. `num_elems` sizes the residual.
absl::StatusOr<std::unique_ptr<Codec>> MakeChunkEncoder(absl::string_view name,
                                                        const CodecOptions& options,
                                                        bool error_feedback, uint32_t num_elems);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_REGISTRY_H_
