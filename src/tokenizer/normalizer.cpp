#include "tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "core/error.h"

namespace moe {
namespace {

const icu::Normalizer2& instance(NormalForm f) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (f) {
    case NormalForm::NFC: n = icu::Normalizer2::getNFCInstance(err); break;
    case NormalForm::NFD: n = icu::Normalizer2::getNFDInstance(err); break;
    case NormalForm::NFKC: n = icu::Normalizer2::getNFKCInstance(err); break;
    case NormalForm::NFKD: n = icu::Normalizer2::getNFKDInstance(err); break;
  }
  if (U_FAILURE(err) || !n) fail("ICU normalizer unavailable: {}", u_errorName(err));
  return *n;
}

}  // namespace

std::string Normalizer::apply(std::string_view text) const {
  std::string cur(text);
  for (NormalForm f : steps_) {
    const icu::Normalizer2& n = instance(f);
    UErrorCode err = U_ZERO_ERROR;
    // Most text is already normalized (all of ASCII is): checking is much cheaper than rebuilding.
    if (n.isNormalizedUTF8(icu::StringPiece(cur.data(), int32_t(cur.size())), err) && U_SUCCESS(err)) continue;
    err = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out);
    n.normalizeUTF8(0, icu::StringPiece(cur.data(), int32_t(cur.size())), sink, nullptr, err);
    if (U_FAILURE(err)) fail("Unicode normalization failed: {}", u_errorName(err));
    cur = std::move(out);
  }
  return cur;
}

}  // namespace moe
