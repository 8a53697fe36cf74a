#include "core/tmp_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace moe {

TmpFile::TmpFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot create: {}", path_, std::strerror(errno));
}

TmpFile::~TmpFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());
}

void TmpFile::write(const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("{}: write failed: {}", path_, std::strerror(w < 0 ? errno : EIO));
    p += w;
    n -= size_t(w);
  }
}

void TmpFile::write_zeros(uint64_t n) {
  static constexpr uint8_t kZeros[4096] = {};
  while (n > 0) {
    const size_t k = size_t(std::min<uint64_t>(n, sizeof(kZeros)));
    write(kZeros, k);
    n -= k;
  }
}

void TmpFile::commit(const std::string& dest) {
  if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", path_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("{}: close failed: {}", path_, std::strerror(errno));
  if (std::rename(path_.c_str(), dest.c_str()) != 0) fail("{}: cannot rename {} to it: {}", dest, path_, std::strerror(errno));
  committed_ = true;
}

}  // namespace moe
