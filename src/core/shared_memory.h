#pragma once
// Memory other processes on the same host can map: an anonymous memory file (memfd)
// mapped shared. The KV pool lives in one so that a decode instance on the same host can
// map its prefill instance's pool read-only and copy blocks out at memcpy speed, where a
// network-shaped transport would bounce every byte through a second copy.
#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>

namespace moe {

// Owns a memfd of `bytes` bytes and its read-write mapping. Pages cost memory only once
// touched, like an anonymous allocation; the contents start zeroed.
class SharedMemory {
 public:
  // Throws moe::Error naming `name` and the cause.
  SharedMemory(const std::string& name, size_t bytes);
  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Another process's SharedMemory, mapped read-only here.
class SharedMapping {
 public:
  // Maps `bytes` bytes of the memory file `fd` (not taken over: the caller closes it).
  // Returns null and sets `error` when the mapping fails.
  static std::unique_ptr<SharedMapping> map(int fd, size_t bytes, std::string& error);
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  const char* data() const { return static_cast<const char*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  SharedMapping(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  void* data_;
  size_t bytes_;
};

}  // namespace moe
