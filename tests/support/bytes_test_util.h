#pragma once
// Helpers for the tests of readers of untrusted bytes (GGUF, safetensors): recognisable
// tensor contents, the error a call throws, and assertions on error messages.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "core/error.h"

namespace moe::testing {

// A fill that writes a recognisable pattern, so a tensor's bytes tell which tensor they
// came from.
inline std::function<void(uint8_t*, size_t)> pattern(uint8_t seed) {
  return [seed](uint8_t* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = uint8_t(seed * 31 + i * 7);
  };
}

// The message of the moe::Error that `call` throws, or "" when it returns.
template <typename F>
std::string error_of(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace moe::testing

#define EXPECT_CONTAINS(text, substring) \
  EXPECT_NE(std::string(text).find(substring), std::string::npos) << (text)

// `message` is an error that must start with "FILE: " and contain `substring`.
#define EXPECT_ERROR_NAMING(message, file, substring)                       \
  do {                                                                      \
    const std::string msg_ = (message);                                     \
    EXPECT_NE(msg_, "") << "expected an error containing: " << (substring); \
    EXPECT_EQ(msg_.rfind(std::string(file) + ": ", 0), 0u) << msg_;         \
    EXPECT_NE(msg_.find(substring), std::string::npos) << msg_;             \
  } while (0)
