#pragma once
// A file written under a temporary name and renamed into place only when complete, so a
// failed or interrupted write never leaves a short file where a reader would find it.
#include <cstddef>
#include <cstdint>
#include <string>

namespace moe {

class TmpFile {
 public:
  // Creates (truncates) `path`; throws moe::Error naming it.
  explicit TmpFile(std::string path);
  // Removes the file unless it was committed.
  ~TmpFile();
  TmpFile(const TmpFile&) = delete;
  TmpFile& operator=(const TmpFile&) = delete;

  void write(const uint8_t* p, size_t n);
  void write_zeros(uint64_t n);
  // Data reaches the disk before the rename, so a crash never leaves a short file at `dest`.
  void commit(const std::string& dest);

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace moe
