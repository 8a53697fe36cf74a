#pragma once
// Unicode normalization steps of a tokenizer.json "normalizer" (NFC for Qwen3; DeepSeek-V3
// has an empty Sequence), done with ICU.
#include <string>
#include <string_view>
#include <vector>

namespace moe {

enum class NormalForm { NFC, NFD, NFKC, NFKD };

class Normalizer {
 public:
  Normalizer() = default;
  explicit Normalizer(std::vector<NormalForm> steps) : steps_(std::move(steps)) {}
  bool empty() const { return steps_.empty(); }
  const std::vector<NormalForm>& steps() const { return steps_; }
  // Text must be valid UTF-8 (callers split invalid bytes off first).
  std::string apply(std::string_view text) const;

 private:
  std::vector<NormalForm> steps_;
};

}  // namespace moe
