#include "disagg/handoff.h"

#include <limits>

#include "core/error.h"

namespace moe::disagg {

nlohmann::json to_json(const Handoff& h) {
  nlohmann::json j = {{"do_remote_prefill", true},
          {"do_remote_decode", false},
          {"remote_engine_id", h.remote_engine_id},
          {"remote_host", h.remote_host},
          {"remote_port", h.remote_port},
          {"remote_block_ids", h.remote_block_ids},
          {"remote_request_id", h.remote_request_id},
          {"lease_ms", h.lease_ms},
          {"prompt_token_ids", h.prompt_token_ids},
          {"first_token_id", h.first_token_id}};
  if (!h.draft_token_ids.empty()) j["draft_token_ids"] = h.draft_token_ids;
  return j;
}

namespace {

const nlohmann::json& field(const nlohmann::json& j, const char* name) {
  if (!j.contains(name)) fail("kv_transfer_params.{} is missing", name);
  return j[name];
}

std::string string_field(const nlohmann::json& j, const char* name) {
  const nlohmann::json& v = field(j, name);
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) fail("kv_transfer_params.{} must be a non-empty string", name);
  return v.get<std::string>();
}

int64_t int_field(const nlohmann::json& j, const char* name, int64_t lo, int64_t hi) {
  const nlohmann::json& v = field(j, name);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    fail("kv_transfer_params.{} must be an integer in [{}, {}]", name, lo, hi);
  }
  return v.get<int64_t>();
}

std::vector<int32_t> ids_field(const nlohmann::json& j, const char* name) {
  const nlohmann::json& v = field(j, name);
  if (!v.is_array()) fail("kv_transfer_params.{} must be an array of non-negative integers", name);
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (const nlohmann::json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      fail("kv_transfer_params.{} must be an array of non-negative integers", name);
    }
    out.push_back(int32_t(e.get<int64_t>()));
  }
  return out;
}

bool flag(const nlohmann::json& j, const char* name) {
  if (!j.contains(name) || j[name].is_null()) return false;
  if (!j[name].is_boolean()) fail("kv_transfer_params.{} must be a boolean", name);
  return j[name].get<bool>();
}

}  // namespace

KvTransferRequest parse_kv_transfer_params(const nlohmann::json& j) {
  if (!j.is_object()) fail("kv_transfer_params must be an object");
  KvTransferRequest r;
  r.do_remote_decode = flag(j, "do_remote_decode");
  r.do_remote_prefill = flag(j, "do_remote_prefill");
  if (r.do_remote_decode && r.do_remote_prefill) fail("kv_transfer_params: do_remote_decode and do_remote_prefill exclude each other");
  if (!r.do_remote_prefill) return r;
  Handoff& h = r.handoff;
  h.remote_engine_id = string_field(j, "remote_engine_id");
  h.remote_host = string_field(j, "remote_host");
  h.remote_port = uint16_t(int_field(j, "remote_port", 1, 65535));
  h.remote_block_ids = ids_field(j, "remote_block_ids");
  h.remote_request_id = string_field(j, "remote_request_id");
  h.lease_ms = int_field(j, "lease_ms", 0, std::numeric_limits<int64_t>::max());
  h.prompt_token_ids = ids_field(j, "prompt_token_ids");
  h.first_token_id = int32_t(int_field(j, "first_token_id", 0, std::numeric_limits<int32_t>::max()));
  if (j.contains("draft_token_ids")) h.draft_token_ids = ids_field(j, "draft_token_ids");
  if (h.prompt_token_ids.empty()) fail("kv_transfer_params.prompt_token_ids must not be empty");
  return r;
}

}  // namespace moe::disagg
