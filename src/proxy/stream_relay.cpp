#include "proxy/stream_relay.h"

#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "proxy/errors.h"

// The coroutines here keep temporaries out of co_await expressions (they are locals first):
// GCC 12 destroys some such temporaries twice.

namespace moe::proxy {

namespace {

// An instance's error answer as one SSE event: its own error object when it sent one.
std::string error_event(Leg leg, const Backend& b, const http::HttpResponse& answer) {
  const Json body = Json::parse(answer.body, nullptr, false);
  if (member(body, "error")) return body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return error_body(bad_gateway(fmt::format("{} instance {} answered HTTP {}: {}", leg_name(leg), b.url, answer.status, answer.body)));
}

bool wants_token_ids(const Json& body) {
  const Json* v = member(body, "return_token_ids");
  return v && v->is_boolean() && v->get<bool>();
}

int64_t integer_member(const Json& j, std::string_view key) {
  const Json* v = member(j, key);
  return v && v->is_number_integer() ? v->get<int64_t>() : 0;
}

}  // namespace

StreamRelay::StreamRelay(http::Exchange& ex, const PdRequest& request, ProxyMetrics& metrics, Dispatch& dispatch,
                         StreamLimits limits, RequestTrace& trace)
    : ex_(ex),
      request_(request),
      metrics_(metrics),
      dispatch_(dispatch),
      limits_(limits),
      trace_(trace),
      rewriter_(request.id, wants_token_ids(request.body)) {}

asio::awaitable<void> StreamRelay::run() {
  InstancePtr p = co_await attempts(Leg::kPrefill);
  while (p && active_->handed_off()) {
    if (!ended_ && !ex_.client_gone()) co_await attempts(Leg::kDecode);
    const auto executor = co_await asio::this_coro::executor;
    if (!decode_started_) release_handoff(executor, p->backend(), active_->handoff(), request_.authorization, limits_.release_timeout);
    if (!resume_ || ended_ || ex_.client_gone()) break;
    p = co_await resume();
  }
  if (!ex_.responded()) count(kClientClosed);
}

void StreamRelay::count(int status) {
  metrics_.count_request(status);
  trace_.set_status(status);
}

bool StreamRelay::can_resume() const {
  return !prompt_ids_.empty() && resumes_ < dispatch_.config().max_attempts && resumable(request_.body);
}

asio::awaitable<InstancePtr> StreamRelay::resume() {
  resume_ = false;
  ++resumes_;
  metrics_.count_resume();
  trace_.mark("resume", {{"generated_tokens", generated_.size()}});
  InstancePtr p;
  resumed_ = resume_body(request_.body, prompt_ids_, generated_);
  if (!resumed_) {
    const ApiError e = bad_gateway("the decode instance failed after the last token of max_tokens");
    co_await fail_with(e);
  } else {
    resume_rewriter_ = std::make_unique<StreamRewriter>(request_.id, wants_token_ids(request_.body));
    active_ = resume_rewriter_.get();
    converter_.emplace(request_.api, int64_t(prompt_ids_.size()), int64_t(generated_.size()));
    decode_started_ = false;
    whole_ = false;
    p = co_await attempts(Leg::kPrefill);
  }
  co_return p;
}

asio::awaitable<InstancePtr> StreamRelay::attempts(Leg which) {
  std::vector<std::string> tried;
  InstancePtr served;
  unsent_failure_.reset();
  for (int attempt = 1; !served && !ended_ && !ex_.client_gone(); ++attempt) {
    const std::optional<Picked> picked = co_await ex_.unless_client_gone(dispatch_.pick(which, request_, tried));
    if (!picked) break;
    if (unsent_failure_ && !picked->route.instance) {
      co_await fail(unsent_failure_->first, unsent_failure_->second);
      break;
    }
    if (picked->error) {
      co_await fail_with(*picked->error);
      break;
    }
    const InstancePtr instance = picked->route.instance;
    trace_.mark("routed", {{"leg", picked->route.decision.whole_request ? "whole" : leg_name(which)},
                           {"instance", instance->name()},
                           {"reason", picked->route.decision.reason}});
    if (which == Leg::kPrefill && picked->route.decision.whole_request) {
      whole_ = true;
      active_->expect_whole_answer();
    }
    const bool alone = which == Leg::kPrefill && dispatch_.alone(*instance);
    leg_relayed_ = retry_ = instance_fault_ = instance_unreachable_ = false;
    held_.clear();
    leg_first_event_.reset();
    may_retry_ = attempt < dispatch_.config().max_attempts;
    const http::Clock::time_point started = http::Clock::now();
    Json body = which == Leg::kDecode ? decode_body(current_body(), active_->handoff())
                : whole_              ? current_body()
                                      : prefill_body(current_body());
    // Where the client's stream stands, in tokens: what a resume continues from.
    body["return_token_ids"] = true;
    co_await leg(which, instance->backend(), body);
    dispatch_.report(*instance, instance_fault_, instance_unreachable_);
    if (retry_) {
      trace_.mark("retry", {{"leg", leg_name(which)}, {"instance", instance->name()}});
      tried.push_back(instance->name());
      continue;
    }
    if (alone && active_->handed_off()) learn_prefill_time(*instance, started);
    served = instance;
  }
  co_return served;
}

void StreamRelay::learn_prefill_time(Instance& p, http::Clock::time_point started) {
  if (!leg_first_event_) return;
  const Json& h = active_->handoff();
  const Json* ids = member(h, "prompt_token_ids");
  if (!ids || !ids->is_array()) return;
  const int64_t cached = integer_member(h, "prompt_cached_tokens");
  const double seconds = std::chrono::duration<double>(*leg_first_event_ - started).count();
  dispatch_.registry().observe_prefill(p, int64_t(ids->size()) - cached, cached, seconds);
}

asio::awaitable<void> StreamRelay::leg(Leg leg, const Backend& b, const Json& body) {
  http::HttpRequest request = leg_request(request_, body);
  if (resumed_) request.target = "/v1/completions";  // a resumed request is token ids, whatever the client's API
  bool broken = false, client_left = false;
  // Each read's events are rewritten and sent in one write before the next read.
  const http::EventBatchHandler relay = [&](std::vector<http::SseEvent>& events,
                                            http::Clock::time_point at) -> asio::awaitable<bool> {
    std::vector<std::string> out;
    for (size_t i = 0; !broken && i < events.size(); ++i) broken = !take(leg, b, events[i].data, at, out);
    // What a prefill leg streams before its hand-off (a chat answer's role chunk) is held
    // back: should the P instance fail before the hand-off, the leg can be tried again
    // elsewhere with nothing of it sent twice.
    if (leg == Leg::kPrefill && !whole_ && !active_->handed_off() && !active_->done()) {
      held_.insert(held_.end(), std::make_move_iterator(out.begin()), std::make_move_iterator(out.end()));
      out.clear();
    } else if (!held_.empty()) {
      out.insert(out.begin(), std::make_move_iterator(held_.begin()), std::make_move_iterator(held_.end()));
      held_.clear();
    }
    if (!out.empty()) leg_relayed_ = true;
    client_left = !co_await send(out);
    co_return !broken && !client_left;
  };
  const std::optional<LegResult> result = co_await ex_.unless_client_gone(stream_leg(leg, b, std::move(request), relay));
  if (!result || client_left) co_return;
  if (broken) {
    co_await instance_failed(leg, failure_);
    co_return;
  }
  co_await finish(leg, b, *result);
}

bool StreamRelay::take(Leg leg, const Backend& b, const std::string& data, http::Clock::time_point at,
                       std::vector<std::string>& out) {
  if (!leg_first_event_) leg_first_event_ = at;
  Relay r;
  try {
    r = leg == Leg::kPrefill ? active_->prefill_event(data) : active_->decode_event(data);
  } catch (const std::exception& err) {
    failure_ = protocol_failure(leg, b, err.what());
    return false;
  }
  generated_.insert(generated_.end(), r.token_ids.begin(), r.token_ids.end());
  if (leg == Leg::kPrefill && active_ == &rewriter_ && active_->handed_off() && prompt_ids_.empty()) {
    if (const Json* ids = member(active_->handoff(), "prompt_token_ids"); ids && ids->is_array()) {
      for (const Json& id : *ids) prompt_ids_.push_back(id.get<int32_t>());
    }
  }
  if (r.data && converter_) r.data = converter_->convert(*r.data);
  // Only the usage event of a speculating instance says this: parse no other event.
  if (data.find("completion_tokens_details") != std::string::npos) trace_.note_usage(Json::parse(data, nullptr, false));
  if (leg == Leg::kPrefill && active_->handed_off()) trace_.prefill_done();
  if (leg == Leg::kDecode) {
    decode_started_ = true;
    trace_.decode_started();
  }
  if (r.text) time_text(at);
  if (r.data) out.push_back(std::move(*r.data));
  return true;
}

asio::awaitable<void> StreamRelay::finish(Leg leg, const Backend& b, const LegResult& result) {
  // P's part ended with its finish chunk; whatever it sent after is not the client's.
  if (leg == Leg::kPrefill && active_->handed_off()) co_return;
  if (!result.response) {
    instance_unreachable_ = true;
    co_await instance_failed(leg, result.failure);
    co_return;
  }
  const http::HttpResponse& answer = *result.response;
  if (answer.streamed && active_->done()) {
    ended_ = true;
    co_await ex_.end_events();
    co_return;
  }
  if (answer.streamed) {
    const std::string message = protocol_failure(leg, b, "its event stream ended before [DONE]");
    co_await instance_failed(leg, message);
    co_return;
  }
  if (answer.status / 100 == 2) {
    const std::string message = protocol_failure(leg, b, fmt::format("HTTP {} without an event stream", answer.status));
    co_await instance_failed(leg, message);
    co_return;
  }
  const std::string event = error_event(leg, b, answer);
  const http::Response whole = relayed(answer);
  if (instance_fault(result)) {
    instance_fault_ = true;
    metrics_.count_leg_failure(leg);
    if (may_retry_ && !leg_relayed_) {
      retry_ = true;
      unsent_failure_.emplace(event, whole);
      co_return;
    }
  }
  co_await fail(event, whole);
}

asio::awaitable<void> StreamRelay::instance_failed(Leg leg, const std::string& message) {
  instance_fault_ = true;
  metrics_.count_leg_failure(leg);
  const ApiError e = bad_gateway(message);
  if (may_retry_ && !leg_relayed_) {
    retry_ = true;
    unsent_failure_.emplace(error_body(e), error_response(e));
    co_return;
  }
  if (leg == Leg::kDecode && leg_relayed_ && can_resume()) {
    resume_ = true;
    co_return;
  }
  co_await fail_with(e);
}

// No early co_return: GCC 12 miscompiles a coroutine returning a value whose first
// statement may return before any co_await.
asio::awaitable<bool> StreamRelay::send(const std::vector<std::string>& events) {
  bool open = !ex_.client_gone();
  if (open && !events.empty() && !ex_.responded()) {
    // Counted before it is sent: a client that has its answer may read /metrics at once.
    count(200);
    open = co_await ex_.start_events();
  }
  if (open && !events.empty()) open = co_await ex_.send_events(events);
  co_return open;
}

asio::awaitable<void> StreamRelay::fail(const std::string& event, const http::Response& whole) {
  ended_ = true;
  if (!ex_.responded()) {
    count(int(whole.result_int()));
    co_await ex_.respond(whole);
    co_return;
  }
  const std::vector<std::string> last{event, std::string("[DONE]")};
  if (co_await ex_.send_events(last)) co_await ex_.end_events();
}

asio::awaitable<void> StreamRelay::fail_with(const ApiError& e) {
  const std::string event = error_body(e);
  const http::Response whole = error_response(e);
  co_await fail(event, whole);
}

void StreamRelay::time_text(http::Clock::time_point at) {
  const auto seconds = [](http::Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  trace_.text_sent(at);
  if (last_text_) {
    metrics_.observe_tpot(seconds(at - *last_text_));
  } else {
    metrics_.observe_ttft(seconds(at - request_.arrived));
    trace_.first_token();
  }
  last_text_ = at;
}

}  // namespace moe::proxy
