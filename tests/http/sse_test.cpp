// Server-Sent Events parsing: events split anywhere across reads, every line ending,
// comments, multi-line data, the OpenAI "[DONE]" sentinel, and stopping early.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "http/sse.h"

namespace moe::http {
namespace {

std::vector<SseEvent> parse(const std::vector<std::string>& reads) {
  SseParser p;
  std::vector<SseEvent> out;
  for (const std::string& r : reads) p.feed(r, [&](const SseEvent& e) {
      out.push_back(e);
      return true;
    });
  return out;
}

bool same(const std::vector<SseEvent>& a, const std::vector<SseEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].data != b[i].data || a[i].event != b[i].event || a[i].id != b[i].id) return false;
  return true;
}

// What an OpenAI-style server sends, with a keep-alive comment, CRLF and CR line ends,
// a multi-line event with a name and an id, and the end sentinel.
const std::string kStream =
    ": keep-alive\n\n"
    "data: {\"choices\":[{\"text\":\"Hel\"}]}\n\n"
    "data: {\"choices\":[{\"text\":\"lo\"}]}\r\n\r\n"
    "event: note\rid: 7\rdata: line one\rdata:line two\r\r"
    "data: [DONE]\n\n";

TEST(Sse, ParsesAWholeStream) {
  const auto events = parse({kStream});
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].data, "{\"choices\":[{\"text\":\"Hel\"}]}");
  EXPECT_EQ(events[1].data, "{\"choices\":[{\"text\":\"lo\"}]}");
  EXPECT_EQ(events[2].event, "note");
  EXPECT_EQ(events[2].id, "7");
  EXPECT_EQ(events[2].data, "line one\nline two");
  EXPECT_EQ(events[3].data, "[DONE]");
  EXPECT_EQ(events[3].event, "");  // fields do not carry over to the next event
}

TEST(Sse, AnySplitIntoTwoReadsGivesTheSameEvents) {
  const auto whole = parse({kStream});
  for (size_t cut = 0; cut <= kStream.size(); ++cut)
    EXPECT_TRUE(same(parse({kStream.substr(0, cut), kStream.substr(cut)}), whole)) << "cut at " << cut;
}

TEST(Sse, OneByteAtATimeGivesTheSameEvents) {
  std::vector<std::string> bytes;
  for (char c : kStream) bytes.emplace_back(1, c);
  EXPECT_TRUE(same(parse(bytes), parse({kStream})));
}

TEST(Sse, CrLfSplitBetweenReadsIsOneLineEnd) {
  const auto events = parse({"data: a\r", "\n\r", "\ndata: b\r\n", "\r\n"});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].data, "a");
  EXPECT_EQ(events[1].data, "b");
}

TEST(Sse, CommentsAndEmptyEventsAreNotDispatched) {
  EXPECT_TRUE(parse({": ping\n\n:another\n\n\n\nevent: x\n\n"}).empty());
}

TEST(Sse, FieldSyntax) {
  const auto events = parse({"data\n\ndata:tight\n\ndata:  two spaces\n\nunknown: x\ndata: y\n\n"});
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].data, "");  // a field name alone is a field with an empty value
  EXPECT_EQ(events[1].data, "tight");
  EXPECT_EQ(events[2].data, " two spaces");  // only one space is part of the syntax
  EXPECT_EQ(events[3].data, "y");
}

TEST(Sse, AnUnfinishedEventIsNotDispatched) {
  const auto events = parse({"data: complete\n\ndata: cut off"});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "complete");
}

TEST(Sse, ByteOrderMarkIsSkippedEvenWhenSplit) {
  const auto events = parse({"\xEF", "\xBB", "\xBF" "data: x\n\n"});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "x");
}

TEST(Sse, ReturningFalseStopsTheParser) {
  SseParser p;
  std::vector<std::string> seen;
  p.feed("data: 1\n\ndata: 2\n\ndata: 3\n\n", [&](const SseEvent& e) {
    seen.push_back(e.data);
    return e.data != "2";
  });
  p.feed("data: 4\n\n", [&](const SseEvent& e) {
    seen.push_back(e.data);
    return true;
  });
  EXPECT_TRUE(p.stopped());
  EXPECT_EQ(seen, (std::vector<std::string>{"1", "2"}));
}

}  // namespace
}  // namespace moe::http
