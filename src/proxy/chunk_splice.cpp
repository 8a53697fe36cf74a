#include "proxy/chunk_splice.h"

#include <charconv>

namespace moe::proxy {

namespace {

constexpr std::string_view kHead = R"({"id":")";
constexpr std::string_view kObject = R"(","object":")";
constexpr std::string_view kCreated = R"(","created":)";
constexpr std::string_view kTokenIds = R"(,"token_ids":[)";

bool has(std::string_view s, std::string_view key) { return s.find(key) != std::string_view::npos; }

// After `key` (a string member's name, its colon and opening quote), whether the value is
// not empty.
bool non_empty_string(std::string_view s, std::string_view key) {
  const size_t at = s.find(key);
  return at != std::string_view::npos && at + key.size() < s.size() && s[at + key.size()] != '"';
}

}  // namespace

std::optional<SplicedChunk> splice_chunk(std::string_view chunk, std::string_view id, int64_t created, bool keep_token_ids) {
  if (!chunk.starts_with(kHead) || !chunk.ends_with('}')) return std::nullopt;
  if (has(chunk, R"("kv_transfer_params")") || has(chunk, R"("error":)") || has(chunk, R"("logprobs":{)") ||
      has(chunk, R"("logprobs":[)")) {
    return std::nullopt;
  }
  const size_t id_end = chunk.find('"', kHead.size());
  if (id_end == std::string_view::npos || chunk.substr(kHead.size(), id_end - kHead.size()).find('\\') != std::string_view::npos ||
      chunk.substr(id_end, kObject.size()) != kObject) {
    return std::nullopt;
  }
  const size_t object_end = chunk.find('"', id_end + kObject.size());
  if (object_end == std::string_view::npos || chunk.substr(object_end, kCreated.size()) != kCreated) return std::nullopt;
  const size_t number = object_end + kCreated.size();
  int64_t theirs = 0;
  const auto [number_end, ec] = std::from_chars(chunk.data() + number, chunk.data() + chunk.size(), theirs);
  if (ec != std::errc() || number_end == chunk.data() + chunk.size() || *number_end != ',') return std::nullopt;
  const size_t after_created = size_t(number_end - chunk.data());

  SplicedChunk out;
  size_t ids_begin = chunk.find(kTokenIds, after_created), ids_end = ids_begin;
  if (ids_begin == std::string_view::npos && has(chunk, R"("token_ids":)")) return std::nullopt;
  if (ids_begin != std::string_view::npos) {
    const char* p = chunk.data() + ids_begin + kTokenIds.size();
    const char* end = chunk.data() + chunk.size();
    while (p < end && *p != ']') {
      int32_t token = 0;
      const auto [next, err] = std::from_chars(p, end, token);
      if (err != std::errc() || next == end || (*next != ',' && *next != ']')) return std::nullopt;
      out.token_ids.push_back(token);
      p = *next == ',' ? next + 1 : next;
    }
    if (p == end) return std::nullopt;
    ids_end = size_t(p - chunk.data()) + 1;
    if (has(chunk.substr(ids_end), kTokenIds)) return std::nullopt;
  }
  out.text = non_empty_string(chunk, R"("text":")") || non_empty_string(chunk, R"("content":")");

  out.data.reserve(chunk.size() + id.size());
  out.data.append(kHead).append(id).append(chunk.substr(id_end, number - id_end)).append(std::to_string(created));
  if (ids_begin == std::string_view::npos || keep_token_ids) {
    out.data.append(chunk.substr(after_created));
  } else {
    out.data.append(chunk.substr(after_created, ids_begin - after_created)).append(chunk.substr(ids_end));
  }
  return out;
}

}  // namespace moe::proxy
