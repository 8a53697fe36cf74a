#pragma once
// The prefill/decode hand-off as it travels in requests and responses, under vLLM's
// "kv_transfer_params" names so that proxies built for vLLM recognise it:
//   to P:   {"do_remote_decode": true}
//   from P: {"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id",
//            "remote_host", "remote_port", "remote_block_ids", "remote_request_id",
//            "lease_ms", "prompt_token_ids", "first_token_id", "draft_token_ids"}  (null: nothing
//            to hand off; draft_token_ids is moengine's own, absent unless P drafted with
//            the MTP layer)
//   to D:   what P answered, as is.
// remote_host:remote_port is P's HTTP address: D asks it for the KV endpoint and layout
// (GET /internal/kv/info) and releases the lease there (POST /internal/kv/release).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moe::disagg {

struct Handoff {
  std::string remote_engine_id;
  std::string remote_host;
  uint16_t remote_port = 0;
  std::vector<int32_t> remote_block_ids;  // P's blocks of the prompt, in position order
  std::string remote_request_id;          // names the lease
  int64_t lease_ms = 0;
  std::vector<int32_t> prompt_token_ids;
  int32_t first_token_id = -1;            // the token P sampled after the prompt
  std::vector<int32_t> draft_token_ids;   // what P's MTP layer drafted after it
};

nlohmann::json to_json(const Handoff& h);

// What a request's "kv_transfer_params" asks for.
struct KvTransferRequest {
  bool do_remote_decode = false;   // a prefill leg: hand the KV off
  bool do_remote_prefill = false;  // a decode leg: `handoff` says where the KV is
  Handoff handoff;
};

// Throws moe::Error naming the field ("kv_transfer_params.remote_block_ids must be ...").
KvTransferRequest parse_kv_transfer_params(const nlohmann::json& j);

}  // namespace moe::disagg
