// dump_logits: reference logits from llama.cpp for a GGUF model and given token ids.
//
// Our own program (not part of llama.cpp); it only calls llama.cpp's public C API (llama.h).
// scripts/llamacpp.sh builds it against the libllama that script builds in .cache/llamacpp.
//
//   dump_logits --model M.gguf --prompt-ids 1,2,3 [--max-tokens N] [--threads T]
//               [--logits-out out.npy] [--kv-type f32|f16|bf16|q8_0] [--flash-attn off|on|auto]
//               [--n-ctx C] [--n-ubatch U] [--stop-at-eog] [--decode-ids 4,5,6] [--verbose]
//
// What it does:
//   1. evaluates all prompt ids as one batch, with logits for every position;
//   2. greedy-decodes N more tokens one at a time (argmax; ties go to the lowest id), each
//      generated token except the last is fed back and its logits are kept.
//      With --decode-ids the continuation is forced instead of greedy (teacher forcing: e.g.
//      another engine's output ids), so rows stay aligned even where the two engines' argmax
//      would differ; "argmax_ids" in the JSON still reports llama.cpp's own greedy choice at
//      each step.
// The .npy file is float32, C order, shape [rows, n_vocab] where row i holds the logits after
// consuming token i of (prompt ids ++ generated ids); rows = n_prompt + max(N - 1, 0)
// (= n_prompt + n_generated - 1 when N >= 1). The generated ids and some facts go to stdout
// as one JSON object; llama.cpp's own log goes to stderr (errors only unless --verbose).

#include "llama.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
    std::string model;
    std::vector<llama_token> prompt;
    int max_tokens = 0;
    int threads = 0;
    std::string logits_out;
    ggml_type kv_type = GGML_TYPE_F32;
    std::string kv_name = "f32";
    llama_flash_attn_type flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    uint32_t n_ctx = 0;
    uint32_t n_ubatch = 0;
    bool stop_at_eog = false;
    std::vector<llama_token> decode_ids;  // forced continuation (teacher forcing)
    bool verbose = false;
};

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "dump_logits: error: %s\n", msg.c_str());
    std::exit(1);
}

void usage() {
    std::fprintf(stderr,
                 "usage: dump_logits --model M.gguf --prompt-ids 1,2,3 [--max-tokens N] [--threads T]\n"
                 "                   [--logits-out out.npy] [--kv-type f32|f16|bf16|q8_0]\n"
                 "                   [--flash-attn off|on|auto] [--n-ctx C] [--n-ubatch U]\n"
                 "                   [--stop-at-eog] [--decode-ids 4,5,6] [--verbose]\n"
                 "defaults: --max-tokens 0, --threads = hardware threads, --kv-type f32, --flash-attn off,\n"
                 "          --n-ctx = rows rounded up to 256, --n-ubatch = min(n_prompt, 512)\n"
                 "--decode-ids: feed these ids instead of greedy ones (implies --max-tokens = their count)\n");
}

long parse_int(const std::string& s, const char* what) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || errno != 0 || end == nullptr || *end != '\0') {
        die(std::string("bad integer for ") + what + ": '" + s + "'");
    }
    return v;
}

std::vector<llama_token> parse_ids(const std::string& s) {
    std::vector<llama_token> ids;
    size_t pos = 0;
    while (pos <= s.size()) {
        size_t comma = s.find(',', pos);
        if (comma == std::string::npos) comma = s.size();
        std::string item = s.substr(pos, comma - pos);
        // allow spaces and brackets, e.g. "[1, 2, 3]"
        item.erase(std::remove_if(item.begin(), item.end(),
                                  [](char c) { return c == ' ' || c == '[' || c == ']' || c == '\t'; }),
                   item.end());
        if (!item.empty()) ids.push_back(static_cast<llama_token>(parse_int(item, "--prompt-ids")));
        pos = comma + 1;
    }
    return ids;
}

Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value after " + a);
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            usage();
            std::exit(0);
        } else if (a == "--model" || a == "-m") {
            o.model = value();
        } else if (a == "--prompt-ids") {
            o.prompt = parse_ids(value());
        } else if (a == "--max-tokens" || a == "-n") {
            o.max_tokens = static_cast<int>(parse_int(value(), "--max-tokens"));
        } else if (a == "--threads" || a == "-t") {
            o.threads = static_cast<int>(parse_int(value(), "--threads"));
        } else if (a == "--logits-out" || a == "-o") {
            o.logits_out = value();
        } else if (a == "--kv-type") {
            o.kv_name = value();
            if (o.kv_name == "f32") o.kv_type = GGML_TYPE_F32;
            else if (o.kv_name == "f16") o.kv_type = GGML_TYPE_F16;
            else if (o.kv_name == "bf16") o.kv_type = GGML_TYPE_BF16;
            else if (o.kv_name == "q8_0") o.kv_type = GGML_TYPE_Q8_0;
            else die("unknown --kv-type " + o.kv_name);
        } else if (a == "--flash-attn" || a == "-fa") {
            const std::string v = value();
            if (v == "off" || v == "0") o.flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            else if (v == "on" || v == "1") o.flash_attn = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            else if (v == "auto") o.flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
            else die("unknown --flash-attn " + v);
        } else if (a == "--n-ctx" || a == "-c") {
            o.n_ctx = static_cast<uint32_t>(parse_int(value(), "--n-ctx"));
        } else if (a == "--n-ubatch") {
            o.n_ubatch = static_cast<uint32_t>(parse_int(value(), "--n-ubatch"));
        } else if (a == "--decode-ids") {
            o.decode_ids = parse_ids(value());
        } else if (a == "--stop-at-eog") {
            o.stop_at_eog = true;
        } else if (a == "--verbose" || a == "-v") {
            o.verbose = true;
        } else {
            usage();
            die("unknown argument " + a);
        }
    }
    if (o.model.empty()) die("--model is required");
    if (o.prompt.empty()) die("--prompt-ids is required (at least one id)");
    if (o.max_tokens < 0) die("--max-tokens must be >= 0");
    if (!o.decode_ids.empty()) {
        if (o.stop_at_eog) die("--decode-ids and --stop-at-eog do not mix");
        o.max_tokens = static_cast<int>(o.decode_ids.size());
    }
    if (o.threads <= 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return o;
}

// NumPy .npy v1.0 writer: float32, C order, shape [rows, cols].
void write_npy(const std::string& path, const std::vector<float>& data, size_t rows, size_t cols) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                         std::to_string(cols) + "), }";
    const size_t preamble = 10;  // magic(6) + version(2) + header_len(2)
    size_t total = preamble + header.size() + 1;
    const size_t pad = (64 - total % 64) % 64;
    header.append(pad, ' ');
    header.push_back('\n');
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) die("cannot open " + path + " for writing");
    const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    const uint16_t hlen = static_cast<uint16_t>(header.size());
    const unsigned char hl[2] = {static_cast<unsigned char>(hlen & 0xff), static_cast<unsigned char>(hlen >> 8)};
    bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(hl, 1, 2, f) == 2 &&
              std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
              std::fwrite(data.data(), sizeof(float), data.size(), f) == data.size();
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) die("short write to " + path);
}

std::string json_escape(const std::string& s) {
    std::string r;
    for (char c : s) {
        switch (c) {
            case '"': r += "\\\""; break;
            case '\\': r += "\\\\"; break;
            case '\n': r += "\\n"; break;
            case '\t': r += "\\t"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    r += buf;
                } else {
                    r += c;
                }
        }
    }
    return r;
}

std::string json_ids(const std::vector<llama_token>& ids) {
    std::string r = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) r += ",";
        r += std::to_string(ids[i]);
    }
    return r + "]";
}

llama_token argmax(const float* row, int n) {
    int best = 0;
    for (int j = 1; j < n; ++j) {
        if (row[j] > row[best]) best = j;  // strict: ties keep the lowest id
    }
    return static_cast<llama_token>(best);
}

bool g_verbose = false;

void log_cb(ggml_log_level level, const char* text, void*) {
    static ggml_log_level last = GGML_LOG_LEVEL_NONE;
    if (level != GGML_LOG_LEVEL_CONT) last = level;
    if (g_verbose || last >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_args(argc, argv);
    g_verbose = o.verbose;
    llama_log_set(log_cb, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(o.model.c_str(), mp);
    if (!model) die("failed to load model " + o.model);

    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const int n_prompt = static_cast<int>(o.prompt.size());
    for (const auto* ids : {&o.prompt, &o.decode_ids}) {
        for (llama_token t : *ids) {
            if (t < 0 || t >= n_vocab) die("token id " + std::to_string(t) + " out of range [0, " + std::to_string(n_vocab) + ")");
        }
    }
    const int max_rows = n_prompt + std::max(o.max_tokens - 1, 0);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = o.n_ctx ? o.n_ctx : static_cast<uint32_t>((max_rows + 255) / 256 * 256);
    cp.n_batch = static_cast<uint32_t>(std::max(n_prompt, 1));
    cp.n_ubatch = o.n_ubatch ? o.n_ubatch : static_cast<uint32_t>(std::min(n_prompt, 512));
    cp.n_seq_max = 1;
    cp.n_threads = o.threads;
    cp.n_threads_batch = o.threads;
    cp.type_k = o.kv_type;
    cp.type_v = o.kv_type;
    cp.flash_attn_type = o.flash_attn;
    cp.no_perf = true;
    if (static_cast<int>(cp.n_ctx) < max_rows) die("--n-ctx smaller than the number of tokens to evaluate");

    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) die("failed to create llama context (unsupported --kv-type / --flash-attn combination?)");

    std::vector<float> logits;
    logits.reserve(static_cast<size_t>(max_rows) * n_vocab);
    std::vector<llama_token> generated;
    std::vector<llama_token> argmax_ids;  // llama.cpp's own greedy choice after each of the last rows

    // 1. prompt as one batch, all logits
    const auto t_prompt = std::chrono::steady_clock::now();
    llama_batch batch = llama_batch_init(n_prompt, 0, 1);
    batch.n_tokens = n_prompt;
    for (int i = 0; i < n_prompt; ++i) {
        batch.token[i] = o.prompt[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    int rc = llama_decode(ctx, batch);
    llama_batch_free(batch);
    if (rc != 0) die("llama_decode failed on the prompt, rc=" + std::to_string(rc));
    for (int i = 0; i < n_prompt; ++i) {
        const float* row = llama_get_logits_ith(ctx, i);
        if (!row) die("no logits for prompt position " + std::to_string(i));
        logits.insert(logits.end(), row, row + n_vocab);
    }
    const double prompt_ms = ms_since(t_prompt);

    // 2. greedy decode, one token at a time
    const auto t_decode = std::chrono::steady_clock::now();
    bool hit_eog = false;
    for (int step = 0; step < o.max_tokens; ++step) {
        const float* last = logits.data() + (logits.size() - static_cast<size_t>(n_vocab));
        const llama_token best = argmax(last, n_vocab);
        argmax_ids.push_back(best);
        const llama_token next = o.decode_ids.empty() ? best : o.decode_ids[static_cast<size_t>(step)];
        generated.push_back(next);
        if (o.stop_at_eog && llama_vocab_is_eog(vocab, next)) {
            hit_eog = true;
            break;
        }
        if (step + 1 == o.max_tokens) break;  // the last generated token is not fed back
        llama_batch one = llama_batch_get_one(const_cast<llama_token*>(&generated.back()), 1);
        rc = llama_decode(ctx, one);
        if (rc != 0) die("llama_decode failed at generation step " + std::to_string(step) + ", rc=" + std::to_string(rc));
        const float* row = llama_get_logits_ith(ctx, -1);
        if (!row) die("no logits at generation step " + std::to_string(step));
        logits.insert(logits.end(), row, row + n_vocab);
    }
    const double decode_ms = ms_since(t_decode);

    const size_t rows = logits.size() / static_cast<size_t>(n_vocab);
    if (!o.logits_out.empty()) write_npy(o.logits_out, logits, rows, static_cast<size_t>(n_vocab));

    char desc[256] = {0};
    llama_model_desc(model, desc, sizeof desc);
    std::printf("{\"model\":\"%s\",\"desc\":\"%s\",\"n_vocab\":%d,\"n_prompt\":%d,\"prompt_ids\":%s,"
                "\"generated_ids\":%s,\"argmax_ids\":%s,\"forced\":%s,\"hit_eog\":%s,\"rows\":%zu,\"logits_out\":%s,\"kv_type\":\"%s\","
                "\"flash_attn\":\"%s\",\"threads\":%d,\"n_ctx\":%u,\"n_ubatch\":%u,"
                "\"prompt_ms\":%.3f,\"decode_ms\":%.3f}\n",
                json_escape(o.model).c_str(), json_escape(desc).c_str(), n_vocab, n_prompt,
                json_ids(o.prompt).c_str(), json_ids(generated).c_str(), json_ids(argmax_ids).c_str(),
                o.decode_ids.empty() ? "false" : "true", hit_eog ? "true" : "false", rows,
                o.logits_out.empty() ? "null" : ("\"" + json_escape(o.logits_out) + "\"").c_str(),
                o.kv_name.c_str(), llama_flash_attn_type_name(o.flash_attn), o.threads, cp.n_ctx, cp.n_ubatch,
                prompt_ms, decode_ms);

    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
