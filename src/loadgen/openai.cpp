#include "loadgen/openai.h"

namespace moe::loadgen {

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Appends the generated text a chunk carries; returns whether the chunk had a choice.
bool chunk_text(Endpoint e, const nlohmann::json& chunk, std::string& text) {
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return false;
  const nlohmann::json& c = choices->front();
  auto append = [&](const nlohmann::json& obj, const char* key) {
    const auto it = obj.find(key);
    if (it != obj.end() && it->is_string()) text += it->get_ref<const std::string&>();
  };
  if (e == Endpoint::Completions) {
    append(c, "text");
  } else if (const auto delta = c.find("delta"); delta != c.end() && delta->is_object()) {
    // Reasoning models stream their thinking separately; it is generated text all the same.
    append(*delta, "reasoning_content");
    append(*delta, "reasoning");
    append(*delta, "content");
  }
  return true;
}

std::optional<int64_t> count(const nlohmann::json& usage, const char* key) {
  const auto it = usage.find(key);
  if (it == usage.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

Endpoint parse_endpoint(std::string_view path) {
  if (path == "/v1/completions") return Endpoint::Completions;
  if (path == "/v1/chat/completions") return Endpoint::ChatCompletions;
  fail("unsupported endpoint '{}' (use /v1/completions or /v1/chat/completions)", path);
}

const char* endpoint_path(Endpoint e) {
  return e == Endpoint::Completions ? "/v1/completions" : "/v1/chat/completions";
}

nlohmann::json request_body(Endpoint e, const SampleRequest& r, const RequestOptions& o) {
  nlohmann::json body = {{"model", o.model}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  if (e == Endpoint::Completions) {
    if (r.prompt_ids.empty()) {
      body["prompt"] = r.prompt_text;
    } else {
      body["prompt"] = r.prompt_ids;
    }
    body["max_tokens"] = r.output_len;
  } else {
    if (!r.prompt_ids.empty())
      fail("the chat endpoint takes text, not token ids: use --random-prompt words with /v1/chat/completions");
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", r.prompt_text}}});
    body["max_completion_tokens"] = r.output_len;
  }
  if (o.temperature) body["temperature"] = *o.temperature;
  if (o.ignore_eos) body["ignore_eos"] = true;
  if (o.extra_body.is_object()) body.update(o.extra_body);
  return body;
}

void StreamRecorder::on_event(std::string_view data, Clock::time_point arrived) {
  if (data == "[DONE]") return;
  nlohmann::json chunk;
  try {
    chunk = nlohmann::json::parse(data);
  } catch (const nlohmann::json::parse_error& e) {
    fail("the stream carried an event that is not JSON ({}): {}", e.what(), data.substr(0, 200));
  }
  if (!chunk.is_object()) fail("the stream carried a JSON {} where a chunk object belongs", chunk.type_name());
  if (const auto err = chunk.find("error"); err != chunk.end() && !err->is_null()) {
    const auto msg = err->is_object() ? err->find("message") : err->end();
    fail("the server reported an error in the stream: {}",
         msg != err->end() && msg->is_string() ? msg->get<std::string>() : err->dump());
  }
  std::string text;
  if (chunk_text(endpoint_, chunk, text)) {
    if (!first_choice_) first_choice_ = arrived;
    if (!text.empty()) {
      if (!first_content_) {
        first_content_ = arrived;
      } else {
        r_.itl_s.push_back(seconds(arrived - *last_content_));
      }
      last_content_ = arrived;
      ++content_chunks_;
      r_.generated_text += text;
    }
  }
  if (const auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
    if (auto p = count(*usage, "prompt_tokens")) usage_prompt_ = p;
    if (auto c = count(*usage, "completion_tokens")) usage_completion_ = c;
    if (const auto d = usage->find("completion_tokens_details"); d != usage->end() && d->is_object()) {
      r_.accepted_draft_tokens = count(*d, "accepted_prediction_tokens").value_or(0);
      r_.rejected_draft_tokens = count(*d, "rejected_prediction_tokens").value_or(0);
    }
  }
}

RequestResult StreamRecorder::finish(Clock::time_point ended, int64_t expected_prompt_len) const {
  RequestResult r = r_;
  r.e2e_s = seconds(ended - sent_);
  r.prompt_tokens = usage_prompt_.value_or(expected_prompt_len);
  r.output_tokens = usage_completion_.value_or(content_chunks_);
  // Without any text (an answer that is only an end-of-sequence token, say), the first
  // chunk with a choice is when the first token came out.
  const auto first = first_content_ ? first_content_ : first_choice_;
  if (!first) {
    r.error = "the stream ended without a single choice";
    return r;
  }
  r.ttft_s = seconds(*first - sent_);
  r.success = true;
  return r;
}

}  // namespace moe::loadgen
