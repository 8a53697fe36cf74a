#include "launch/log_watch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace moe::launch {
namespace {

class LogWatch : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() / ("log_watch_" + std::to_string(getpid()) + ".log")).string();
    std::filesystem::remove(path_);
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void append(const std::string& text) { std::ofstream(path_, std::ios::app | std::ios::binary) << text; }
  std::string path_;
};

TEST_F(LogWatch, FindsServeAndProxyReadyLinesWithTheirRankAndPort) {
  ReadyLineWatch watch(path_, 0);
  append("loading model ...\nserving tiny on http://127.0.0.1:8100\nproxy on http://0.0.0.0:8000\n");
  append("serving tiny on http://10.0.0.4:8521 (rank 1 of 2)\r\n");
  const std::vector<ReadyLine> lines = watch.poll();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].port, 8100);
  EXPECT_EQ(lines[0].rank, 0);
  EXPECT_EQ(lines[1].port, 8000);
  EXPECT_EQ(lines[2].port, 8521);
  EXPECT_EQ(lines[2].rank, 1);
}

TEST_F(LogWatch, AReadyLineAfterHalfOfAnotherRanksLineIsFound) {
  ReadyLineWatch watch(path_, 0);
  append("[moe] loading weightsserving tiny on http://127.0.0.1:8201 (rank 1 of 2)\n");
  const std::vector<ReadyLine> lines = watch.poll();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].port, 8201);
  EXPECT_EQ(lines[0].rank, 1);
}

TEST_F(LogWatch, ALineIsReadOnlyWhenCompleteAndOnlyOnce) {
  ReadyLineWatch watch(path_, 0);
  append("serving tiny on http://127.0.0.1:82");
  EXPECT_TRUE(watch.poll().empty());
  append("00\n");
  const std::vector<ReadyLine> lines = watch.poll();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].port, 8200);
  EXPECT_TRUE(watch.poll().empty());
}

TEST_F(LogWatch, LinesBeforeTheOffsetAndLinesThatOnlyLookAlikeAreNotReady) {
  append("serving tiny on http://127.0.0.1:8100\n");
  ReadyLineWatch watch(path_, file_size_or_zero(path_));
  append("serving tiny on http://127.0.0.1:0\nserving tiny on http://127.0.0.1:x\nproxy on the way\n");
  append("serving tiny on http://127.0.0.1:8100 (rank -1 of 2)\n");
  EXPECT_TRUE(watch.poll().empty());
}

}  // namespace
}  // namespace moe::launch
