#include "net/sse.h"

#include <gtest/gtest.h>

namespace infera::net {
namespace {

TEST(SseReaderTest, AssemblesEventsSplitAcrossArbitraryChunks) {
  const std::string stream =
      "data: {\"a\":1}\n\n: comment\r\nevent: error\ndata: line1\ndata: line2\r\n\r\ndata: "
      "[DONE]\n\n";
  for (size_t step = 1; step <= stream.size(); ++step) {
    SseReader r;
    std::vector<SseEvent> events;
    for (size_t i = 0; i < stream.size(); i += step) {
      ASSERT_TRUE(r.feed(std::string_view(stream).substr(i, step),
                         [&](const SseEvent& e) { events.push_back(e); }));
    }
    ASSERT_EQ(events.size(), 3u) << "step " << step;
    EXPECT_EQ(events[0].data, "{\"a\":1}");
    EXPECT_EQ(events[1].event, "error");
    EXPECT_EQ(events[1].data, "line1\nline2");
    EXPECT_EQ(events[2].data, "[DONE]");
  }
}

TEST(SseReaderTest, RejectsAnOversizedPartialEvent) {
  SseReader r;
  r.max_event_bytes = 16;
  EXPECT_FALSE(r.feed("data: 0123456789012345678901234567890", [](const SseEvent&) {}));
}

TEST(SseFormatTest, FormatsDataAndNamedEvents) {
  std::string out;
  appendSseData(out, "{}");
  appendSseEvent(out, "error", "x");
  EXPECT_EQ(out, "data: {}\n\nevent: error\ndata: x\n\n");
}

}  // namespace
}  // namespace infera::net
