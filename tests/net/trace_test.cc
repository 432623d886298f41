// W3C trace context and head sampling (net/trace.h): traceparent read as the spec says (and
// refused when it says so), a trace continued from its caller or started, the ratio and
// parent-based decisions, errors kept when asked, and a caller's context passed on unchanged
// when nothing is recorded.
#include "net/trace.h"

#include <gtest/gtest.h>

namespace infera::net {
namespace {

class Collect final : public TraceSink {
 public:
  void submit(std::vector<SpanData> spans) override { traces.push_back(std::move(spans)); }
  std::vector<std::vector<SpanData>> traces;
};

TEST(TraceTest, ReadsTraceparentAsTheSpecSays) {
  const auto p = parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(p);
  EXPECT_EQ(toHex(p->trace_id.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(toHex(p->span_id.data(), 8), "00f067aa0ba902b7");
  EXPECT_TRUE(p->sampled);
  EXPECT_FALSE(
      parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")->sampled);
  // A later version may carry more fields; version 00 may not.
  EXPECT_TRUE(parseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"));
  for (const char* bad :
       {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  // 00 with more
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",        // version ff
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",        // zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",        // zero span id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",        // upper case
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",         // short
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", "garbage"}) {
    EXPECT_FALSE(parseTraceparent(bad)) << bad;
  }
  TraceId t{};
  t[15] = 1;
  SpanId s{};
  s[0] = 0xab;
  EXPECT_EQ(formatTraceparent(t, s, true),
            "00-00000000000000000000000000000001-ab00000000000000-01");
}

TEST(TraceTest, ContinuesTheCallersTraceAndNestsChildren) {
  Collect sink;
  {
    RequestTrace t(&sink, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v",
                   "POST /v1/x");
    ASSERT_TRUE(t.recording());
    const size_t up = t.start("POST", SpanKind::kClient);
    const std::string tp = t.traceparent(up);
    EXPECT_EQ(tp.substr(0, 36), "00-4bf92f3577b34da6a3ce929d0e0e4736-");
    EXPECT_EQ(tp.substr(52), "-01");
    t.attr(up, "server.port", int64_t{8000});
    t.end(up);
    t.finish(200);
  }
  ASSERT_EQ(sink.traces.size(), 1u);
  const auto& spans = sink.traces[0];
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "POST /v1/x");
  EXPECT_EQ(spans[0].kind, SpanKind::kServer);
  EXPECT_EQ(toHex(spans[0].parent_id.data(), 8), "00f067aa0ba902b7");
  EXPECT_EQ(spans[0].tracestate, "k=v");
  EXPECT_EQ(spans[1].parent_id, spans[0].span_id);
  EXPECT_EQ(spans[1].trace_id, spans[0].trace_id);
  EXPECT_LE(spans[0].start_unix_ns, spans[1].start_unix_ns);
  EXPECT_LE(spans[1].end_unix_ns, spans[0].end_unix_ns);
  EXPECT_FALSE(spans[0].error);
}

TEST(TraceTest, SamplesByRatioFollowsParentsAndKeepsErrors) {
  Collect sink;
  sink.sample_ratio = 0;
  sink.errors_always = true;
  for (int i = 0; i < 50; ++i) RequestTrace(&sink, "", "", "GET /a").finish(200);
  EXPECT_TRUE(sink.traces.empty());
  RequestTrace(&sink, "", "", "GET /a").finish(503);
  ASSERT_EQ(sink.traces.size(), 1u);
  EXPECT_TRUE(sink.traces[0][0].error);
  EXPECT_FALSE(sink.traces[0][0].sampled);
  RequestTrace(&sink, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", "GET /a")
      .finish(200);
  EXPECT_EQ(sink.traces.size(), 2u);  // a sampled parent is followed at ratio 0

  // Ratio 0.5 keeps about half of new traces (ids are random: 2,000 draws, 45%..55%).
  Collect half;
  half.sample_ratio = 0.5;
  half.errors_always = false;
  for (int i = 0; i < 2000; ++i) RequestTrace(&half, "", "", "GET /a").finish(200);
  EXPECT_GT(half.traces.size(), 900u);
  EXPECT_LT(half.traces.size(), 1100u);

  // Not recording (ratio 0, no error keeping): a caller's traceparent passes on unchanged.
  Collect none;
  none.sample_ratio = 0;
  none.errors_always = false;
  RequestTrace t(&none, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "", "GET /a");
  EXPECT_FALSE(t.recording());
  EXPECT_EQ(t.traceparent(t.start("x")), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  t.finish(500);
  EXPECT_TRUE(none.traces.empty());
  // Without a sink nothing is recorded either.
  RequestTrace off(nullptr, "", "", "GET /a");
  EXPECT_FALSE(off.recording());
  EXPECT_EQ(off.traceparent(0), "");
}

}  // namespace
}  // namespace infera::net
