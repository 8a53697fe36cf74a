// The UCX transport's same-host path: which UCX_TLS values allow it, what a process
// advertises, and a reader that maps only the memory file the advert names, across
// processes, and sees its owner exit.
#include "disagg/same_host.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "core/shared_memory.h"
#include "support/bytes_test_util.h"

namespace moe::disagg {
namespace {

constexpr size_t kBytes = size_t{1} << 20;

uint8_t pattern_byte(size_t i) { return uint8_t(i * 131 + 7); }

void fill(SharedMemory& memory) {
  auto* bytes = static_cast<uint8_t*>(memory.data());
  for (size_t i = 0; i < memory.bytes(); ++i) bytes[i] = pattern_byte(i);
}

bool holds_pattern(const char* data, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    if (uint8_t(data[i]) != pattern_byte(i)) return false;
  }
  return true;
}

std::string why_not(const nlohmann::json& advert, uint64_t bytes = kBytes) {
  std::string why;
  EXPECT_EQ(SameHostPeer::open(advert, bytes, why), nullptr) << advert.dump();
  return why;
}

TEST(SameHost, UcxTlsDecidesWhetherReadersMap) {
  for (const char* allows : {"", "all", "sm", "shm", "cma", "posix", "sysv", "mm", "sm,tcp", "tcp,cma", "^ib", "^tcp,rc"}) {
    EXPECT_TRUE(ucx_tls_allows_shared_memory(allows)) << allows;
  }
  EXPECT_TRUE(ucx_tls_allows_shared_memory(nullptr));
  for (const char* refuses : {"tcp", "rc,ud", "self", "^sm", "^cma", "^tcp,shm"}) {
    EXPECT_FALSE(ucx_tls_allows_shared_memory(refuses)) << refuses;
  }
}

TEST(SameHost, AdvertNamesThisProcessAndItsFile) {
  SharedMemory memory("same-host-test", kBytes);
  const nlohmann::json advert = same_host_advert({memory.data(), kBytes, memory.fd()});
  EXPECT_EQ(advert.at("pid").get<int64_t>(), int64_t{getpid()});
  EXPECT_EQ(advert.at("fd").get<int>(), memory.fd());
  EXPECT_EQ(advert.at("boot_id").get<std::string>().size(), 36u);
  struct stat st {};
  ASSERT_EQ(fstat(memory.fd(), &st), 0);
  EXPECT_EQ(advert.at("inode").get<uint64_t>(), uint64_t(st.st_ino));
  EXPECT_TRUE(same_host_advert({memory.data(), kBytes, -1}).is_null());
}

TEST(SameHost, MapsTheAdvertisedMemory) {
  SharedMemory memory("same-host-test", kBytes);
  fill(memory);
  std::string why;
  const auto peer = SameHostPeer::open(same_host_advert({memory.data(), kBytes, memory.fd()}), kBytes, why);
  ASSERT_NE(peer, nullptr) << why;
  EXPECT_TRUE(holds_pattern(peer->data(), kBytes));
  static_cast<uint8_t*>(memory.data())[5] = 0xab;
  EXPECT_EQ(uint8_t(peer->data()[5]), 0xab) << "a mapping, not a copy";
  EXPECT_FALSE(peer->exited());
}

TEST(SameHost, RefusesAnythingButTheAdvertisedFile) {
  SharedMemory memory("same-host-test", kBytes), other("same-host-other", kBytes);
  const nlohmann::json advert = same_host_advert({memory.data(), kBytes, memory.fd()});

  nlohmann::json elsewhere = advert;
  elsewhere["boot_id"] = "00000000-0000-0000-0000-000000000000";
  EXPECT_EQ(why_not(elsewhere), "another host");

  nlohmann::json another_file = advert;  // a reused pid whose descriptor is another file
  another_file["fd"] = other.fd();
  EXPECT_CONTAINS(why_not(another_file), "no longer holds the advertised memory");

  EXPECT_CONTAINS(why_not(advert, 2 * kBytes), "no longer holds the advertised memory");

  nlohmann::json closed_fd = advert;
  closed_fd["fd"] = 100000;
  EXPECT_CONTAINS(why_not(closed_fd), "cannot take the memory file");

  nlohmann::json malformed = advert;
  malformed["pid"] = "me";
  EXPECT_CONTAINS(why_not(malformed), "malformed same-host advert");
  EXPECT_EQ(why_not(nullptr), "no memory file advertised");
}

// The layout a child process sends its parent through a pipe.
struct ChildRegion {
  int fd;
  uint64_t dev, inode;
};

TEST(SameHost, MapsAnotherProcessAndSeesItExit) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SharedMemory memory("same-host-child", kBytes);
    fill(memory);
    struct stat st {};
    fstat(memory.fd(), &st);
    const ChildRegion region{memory.fd(), uint64_t(st.st_dev), uint64_t(st.st_ino)};
    if (write(pipe_fds[1], &region, sizeof region) != ssize_t(sizeof region)) _exit(1);
    pause();
    _exit(0);
  }
  close(pipe_fds[1]);
  ChildRegion region{};
  const bool got = read(pipe_fds[0], &region, sizeof region) == ssize_t(sizeof region);
  close(pipe_fds[0]);
  std::unique_ptr<SameHostPeer> peer;
  std::string why;
  if (got) {
    SharedMemory own("same-host-test", 4096);  // for this host's boot id
    nlohmann::json advert = same_host_advert({own.data(), own.bytes(), own.fd()});
    advert["pid"] = int64_t{child};
    advert["fd"] = region.fd;
    advert["dev"] = region.dev;
    advert["inode"] = region.inode;
    peer = SameHostPeer::open(advert, kBytes, why);
  }
  kill(child, SIGKILL);
  ASSERT_TRUE(got);
  ASSERT_NE(peer, nullptr) << why;
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(peer->exited());
  // What was mapped stays readable: the reader learns from the lease release, not from a
  // fault, that the bytes it copied are no longer held.
  EXPECT_TRUE(holds_pattern(peer->data(), kBytes));
}

}  // namespace
}  // namespace moe::disagg
