#include "core/shared_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace moe {

SharedMemory::SharedMemory(const std::string& name, size_t bytes) : bytes_(bytes) {
  fd_ = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot create a memory file: {}", name, std::strerror(errno));
  if (ftruncate(fd_, off_t(bytes)) != 0) {
    const int err = errno;
    close(fd_);
    fail("{}: cannot size the memory file to {} bytes: {}", name, bytes, std::strerror(err));
  }
  data_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (data_ == MAP_FAILED) {
    const int err = errno;
    close(fd_);
    fail("{}: cannot map {} bytes: {}", name, bytes, std::strerror(err));
  }
}

SharedMemory::~SharedMemory() {
  munmap(data_, bytes_);
  close(fd_);
}

std::unique_ptr<SharedMapping> SharedMapping::map(int fd, size_t bytes, std::string& error) {
  void* data = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    error = std::strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<SharedMapping>(new SharedMapping(data, bytes));
}

SharedMapping::~SharedMapping() { munmap(data_, bytes_); }

}  // namespace moe
