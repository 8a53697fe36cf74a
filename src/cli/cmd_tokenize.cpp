// moengine tokenize: text to token ids and back with a model's own tokenizer, and chat
// templates rendered the way the model expects.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/token_ids_arg.h"
#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/stream_decoder.h"

namespace moe::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer;
  std::string text;
  bool text_given = false;
  std::string decode;
  std::string chat;
  bool add_generation_prompt = false;
  bool add_special = false;
  bool no_parse_special = false;
  bool json = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Token texts for display: raw bytes, with incomplete UTF-8 shown as U+FFFD.
nlohmann::json pieces(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  nlohmann::json out = nlohmann::json::array();
  for (int32_t id : ids) out.push_back(utf8_sanitize(tok.token_bytes(id)));
  return out;
}

void run(const TokenizeArgs& a) {
  const int modes = int(a.text_given) + int(!a.decode.empty()) + int(!a.chat.empty());
  if (modes > 1) fail("give at most one of --text, --decode and --chat");
  const Tokenizer tok = load_tokenizer(a.tokenizer);

  if (!a.decode.empty()) {
    const std::vector<int32_t> ids = parse_token_ids(a.decode, "--decode");
    const std::string text = utf8_sanitize(tok.decode(ids));
    if (a.json) std::printf("%s\n", nlohmann::json({{"ids", ids}, {"text", text}, {"tokens", pieces(tok, ids)}}).dump().c_str());
    else std::printf("%s\n", text.c_str());
    return;
  }

  std::string text;
  bool from_chat = false;
  if (!a.chat.empty()) {
    if (tok.chat_template().empty()) fail("{} has no chat template", a.tokenizer);
    nlohmann::ordered_json messages;
    try {
      messages = nlohmann::ordered_json::parse(read_file(a.chat));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", a.chat, e.what());
    }
    // Either a bare messages array or an object with messages (and tools, enable_thinking...).
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    if (messages.is_object()) {
      extra = messages;
      messages = extra["messages"];
      extra.erase("messages");
    }
    if (!messages.is_array()) fail("{}: expected an array of messages or an object with \"messages\"", a.chat);
    auto token_text = [&](int32_t id) { return id >= 0 ? tok.spec().tokens[size_t(id)] : std::string(); };
    text = ChatTemplate(tok.chat_template())
               .render(chat_context(messages, a.add_generation_prompt, token_text(tok.bos_id()), token_text(tok.eos_id()), extra));
    from_chat = true;
  } else if (a.text_given) {
    text = a.text;
  } else {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  // A rendered chat already holds its BOS, and its special tokens are the template's own.
  const std::vector<int32_t> ids = tok.encode(text, a.add_special && !from_chat, from_chat || !a.no_parse_special);
  if (a.json) {
    nlohmann::json j = {{"ids", ids}, {"count", ids.size()}, {"tokens", pieces(tok, ids)}};
    if (from_chat) j["prompt"] = text;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  if (from_chat) std::fprintf(stderr, "%s\n", text.c_str());
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode text to token ids, decode ids, or render a chat template");
  cmd->footer(
      "Examples:\n"
      "  moengine tokenize --tokenizer tokenizer.json --text 'Hello, world'\n"
      "  echo 'Hello' | moengine tokenize --tokenizer model.gguf --json\n"
      "  moengine tokenize --tokenizer model.gguf --decode 19923,14,2058\n"
      "  moengine tokenize --tokenizer tokenizer.json --chat chat.json --add-generation-prompt --json\n"
      "--tokenizer takes a Hugging Face tokenizer.json (tokenizer_config.json beside it supplies the chat\n"
      "template and BOS settings) or a GGUF model file. --chat takes a JSON array of messages, or an object\n"
      "{\"messages\": [...], \"tools\": [...], \"enable_thinking\": false}; the rendered prompt goes to stderr\n"
      "(or \"prompt\" with --json) and its ids to stdout.");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json or .gguf file")->required();
  cmd->add_option("--text", args->text, "Text to encode (default: read stdin)")->each([args](const std::string&) { args->text_given = true; });
  cmd->add_option("--decode", args->decode, "Comma-separated token ids to decode, e.g. 1,2,3");
  cmd->add_option("--chat", args->chat, "JSON file with the messages to render with the chat template");
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt, "With --chat: end with the assistant's turn opener");
  cmd->add_flag("--add-special", args->add_special, "Add BOS/EOS as the tokenizer asks (add_bos_token)");
  cmd->add_flag("--no-parse-special", args->no_parse_special, "Encode special-token text as plain text");
  cmd->add_flag("--json", args->json, "Print {\"ids\", \"count\", \"tokens\"} (or {\"ids\", \"text\"} with --decode) as JSON");
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
