#pragma once
// A read-only memory map of a whole file. Model weights are used in place from the map.
#include <cstddef>
#include <cstdint>
#include <string>

namespace moe {

class MmapFile {
 public:
  explicit MmapFile(const std::string& path);  // throws moe::Error naming the path
  ~MmapFile();
  MmapFile(const MmapFile&) = delete;
  MmapFile& operator=(const MmapFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Asks the kernel to read the range ahead (weights touched on the first token).
  void prefetch(size_t offset, size_t length) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace moe
