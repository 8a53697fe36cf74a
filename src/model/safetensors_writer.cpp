// Safetensors writer: one file, shards with a Hugging Face style index, or bytes in memory.
// Files go to PATH.tmp and are renamed into place, so a reader never sees a short file.
#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tmp_file.h"
#include "model/safetensors.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// JSON string literal for `s`; nlohmann refuses invalid UTF-8, which the format forbids.
std::string quote(const std::string& s, std::string_view what) {
  try {
    return nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    fail("safetensors writer: {} is not valid UTF-8", what);
  }
}

constexpr const char* kIndexName = "model.safetensors.index.json";

constexpr std::string_view kShardPattern = "model-#####-of-#####.safetensors";  // # a digit

bool is_shard_name(std::string_view name) {
  if (name.size() != kShardPattern.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const bool ok = kShardPattern[i] == '#' ? name[i] >= '0' && name[i] <= '9'
                                            : name[i] == kShardPattern[i];
    if (!ok) return false;
  }
  return true;
}

// Files with write_sharded's names from an earlier write to `dir` that this one did not
// replace: left there, an old index would hide a new single file and old shards would make
// the directory ambiguous.
void remove_stale(const std::string& dir, const std::vector<std::string>& written) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    const bool ours = name == "model.safetensors" || name == kIndexName || is_shard_name(name);
    if (ours && std::find(written.begin(), written.end(), name) == written.end()) {
      stale.push_back(f.path());
    }
  }
  if (ec) fail("{}: cannot list: {}", dir, ec.message());
  for (const fs::path& p : stale) {
    if (!fs::remove(p, ec) && ec) {
      fail("{}: cannot remove the old file: {}", p.string(), ec.message());
    }
  }
}

}  // namespace

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  quote(key, fmt::format("metadata key '{}'", key));
  quote(value, fmt::format("the value of metadata '{}'", key));
  for (auto& kv : metadata_) {
    if (kv.first == key) {
      kv.second = value;
      return;
    }
  }
  metadata_.emplace_back(key, value);
}

void SafetensorsWriter::add(const std::string& name, StDtype dtype, std::vector<int64_t> shape,
                            Fill fill) {
  if (name == "__metadata__") fail("safetensors writer: '__metadata__' cannot name a tensor");
  quote(name, fmt::format("tensor name '{}'", name));
  if (names_.count(name)) fail("safetensors writer: duplicate tensor name '{}'", name);
  uint64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0) {
      fail("safetensors writer: tensor '{}': negative dimension in [{}]", name,
           fmt::join(shape, ", "));
    }
    if (d != 0 && n > uint64_t(std::numeric_limits<int64_t>::max()) / uint64_t(d)) {
      fail("safetensors writer: tensor '{}': element count of [{}] overflows int64", name,
           fmt::join(shape, ", "));
    }
    n *= uint64_t(d);
  }
  const size_t elem = st_dtype_size(dtype);
  if (n > std::numeric_limits<size_t>::max() / elem) {
    fail("safetensors writer: tensor '{}': byte size overflows", name);
  }
  names_.insert(name);
  tensors_.push_back({name, dtype, std::move(shape), size_t(n * elem), std::move(fill)});
}

std::vector<uint8_t> SafetensorsWriter::encode_header() const {
  // Built as text rather than as a JSON object so that the order is the order added and the
  // cost stays linear for checkpoints with 100k tensors.
  std::string text = "{";
  if (!metadata_.empty()) {
    text += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata_.size(); ++i) {
      if (i) text += ',';
      text += quote(metadata_[i].first, "a metadata key") + ':' +
              quote(metadata_[i].second, "a metadata value");
    }
    text += '}';
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    if (text.size() > 1) text += ',';
    text += fmt::format("{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                        quote(t.name, "a tensor name"), st_dtype_name(t.dtype),
                        fmt::join(t.shape, ","), offset, offset + t.n_bytes);
    offset += t.n_bytes;
  }
  text += '}';
  // Spaces are JSON whitespace: padding them in puts the data section on an 8-byte boundary.
  text.resize((text.size() + 7) / 8 * 8, ' ');
  std::vector<uint8_t> out(8 + text.size());
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  const std::vector<uint8_t> header = encode_header();
  TmpFile file(path + ".tmp");
  file.write(header.data(), header.size());
  // One buffer, reused: memory stays at the largest tensor however big the file is.
  std::vector<uint8_t> buf;
  for (const Tensor& t : tensors_) {
    buf.assign(t.n_bytes, 0);
    if (t.fill) t.fill(buf.data(), t.n_bytes);
    file.write(buf.data(), t.n_bytes);
  }
  file.commit(path);
}

std::vector<uint8_t> SafetensorsWriter::to_bytes() const {
  std::vector<uint8_t> out = encode_header();
  size_t total = out.size();
  for (const Tensor& t : tensors_) total += t.n_bytes;
  out.reserve(total);
  for (const Tensor& t : tensors_) {
    const size_t at = out.size();
    out.resize(at + t.n_bytes, 0);
    if (t.fill) t.fill(out.data() + at, t.n_bytes);
  }
  return out;
}

void SafetensorsWriter::write_sharded(const std::string& dir, uint64_t max_shard_bytes) const {
  if (max_shard_bytes == 0) fail("{}: the shard size limit must be positive", dir);
  std::vector<std::vector<size_t>> shards;
  uint64_t in_last = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const uint64_t n = tensors_[i].n_bytes;
    if (shards.empty() || (!shards.back().empty() && in_last + n > max_shard_bytes)) {
      shards.emplace_back();
      in_last = 0;
    }
    shards.back().push_back(i);
    in_last += n;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create: {}", dir, ec.message());
  const fs::path index_path = fs::path(dir) / kIndexName;
  std::vector<std::string> written;
  if (shards.size() <= 1) {
    written.push_back("model.safetensors");
    write((fs::path(dir) / written[0]).string());
    remove_stale(dir, written);
    return;
  }

  nlohmann::json index;
  uint64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, shards.size());
    SafetensorsWriter shard;
    shard.metadata_ = metadata_;
    for (const size_t i : shards[s]) {
      shard.tensors_.push_back(tensors_[i]);
      index["weight_map"][tensors_[i].name] = file;
      total += tensors_[i].n_bytes;
    }
    shard.write((fs::path(dir) / file).string());
    written.push_back(file);
  }
  index["metadata"]["total_size"] = total;
  const std::string text = index.dump(2) + "\n";
  TmpFile out(index_path.string() + ".tmp");
  out.write(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  out.commit(index_path.string());
  written.push_back(kIndexName);
  remove_stale(dir, written);
}

}  // namespace moe
