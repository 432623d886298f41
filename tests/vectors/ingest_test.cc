// The client side of the vector index: file readers (every format, bad records named by line and
// column), the retry policy (retry-after honoured, back-off bounded), and the batch pipeline
// (bounded, ordered prefixes for the checkpoint, first failure stops the rest).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "vectors/client.h"
#include "vectors/ingest.h"
#include "vectors/internal/pipeline.h"

namespace infera::vectors {
namespace {

class IngestFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("infera-ingest-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  template <typename T>
  std::string vecs(const std::string& name, const std::vector<std::vector<T>>& rows) {
    std::string bytes;
    for (const auto& r : rows) {
      const int32_t d = int32_t(r.size());
      bytes.append(reinterpret_cast<const char*>(&d), 4);
      bytes.append(reinterpret_cast<const char*>(r.data()), r.size() * sizeof(T));
    }
    return write(name, bytes);
  }
  // Every point of the file, or the reader's first error.
  Result<std::vector<FilePoint>> readAll(const std::string& path, ReadOptions o = {}) {
    INFERA_ASSIGN_OR_RETURN(auto r, VectorFileReader::open(path, o));
    std::vector<FilePoint> out;
    for (;;) {
      FilePoint p;
      INFERA_ASSIGN_OR_RETURN(bool more, r->next(p));
      if (!more) break;
      out.push_back(std::move(p));
    }
    EXPECT_EQ(r->offset(), r->size());
    return out;
  }
  std::filesystem::path dir_;
};

TEST_F(IngestFiles, ReadsFvecsIvecsAndBvecsWithRowIds) {
  auto f = readAll(vecs<float>("a.fvecs", {{1.5f, 2, 3}, {4, 5, 6.25f}}), {.first_id = 10});
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->size(), 2u);
  EXPECT_EQ((*f)[0].id, 10);
  EXPECT_EQ((*f)[1].id, 11);
  EXPECT_EQ((*f)[1].vector, (std::vector<float>{4, 5, 6.25f}));
  auto i = readAll(vecs<int32_t>("a.ivecs", {{7, -8}}));
  ASSERT_TRUE(i.ok()) << i.status().message();
  EXPECT_EQ((*i)[0].vector, (std::vector<float>{7, -8}));
  auto b = readAll(vecs<uint8_t>("a.bvecs", {{0, 255, 3}}));
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ((*b)[0].vector, (std::vector<float>{0, 255, 3}));
}

TEST_F(IngestFiles, BinaryRecordsOfTheWrongDimensionOrTruncatedAreNamed) {
  auto f = readAll(vecs<float>("d.fvecs", {{1, 2, 3}, {1, 2}}), {.dim = 3});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(
      f.status().message().find("d.fvecs: record 2 (byte 16): dimension 2, the collection's is 3"),
      std::string::npos)
      << f.status().message();
  std::string bytes;
  const int32_t d = 4;
  bytes.append(reinterpret_cast<const char*>(&d), 4);
  bytes.append(8, '\0');
  auto t = readAll(write("t.fvecs", bytes));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("record 1 (byte 0): truncated record"), std::string::npos)
      << t.status().message();
  const float nan = std::nanf("");
  auto n = readAll(vecs<float>("n.fvecs", {{1, nan}}));
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("component 2 is not a finite number"), std::string::npos);
}

TEST_F(IngestFiles, ReadsTsvWithAndWithoutAnIdColumn) {
  const std::string p = write("a.tsv", "1\t2\t3\t100\n# a comment\n\n4 5 6 101\r\n7,8,9,102\n");
  auto ignored = readAll(p, {.dim = 3, .ignore_extra_columns = true});
  ASSERT_TRUE(ignored.ok()) << ignored.status().message();
  ASSERT_EQ(ignored->size(), 3u);
  EXPECT_EQ((*ignored)[2].id, 2);  // row numbers
  EXPECT_EQ((*ignored)[2].line, 5u);
  EXPECT_EQ((*ignored)[1].vector, (std::vector<float>{4, 5, 6}));
  auto last = readAll(p, {.dim = 3, .id_column = ReadOptions::IdColumn::kLast});
  ASSERT_TRUE(last.ok()) << last.status().message();
  EXPECT_EQ((*last)[1].id, 101);
  auto first = readAll(p, {.dim = 3, .id_column = ReadOptions::IdColumn::kFirst});
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ((*first)[0].id, 1);
  EXPECT_EQ((*first)[0].vector, (std::vector<float>{2, 3, 100}));
  auto uuid = readAll(write("u.tsv", "550E8400-E29B-41D4-A716-446655440000 1 2\n"),
                      {.id_column = ReadOptions::IdColumn::kFirst});
  ASSERT_TRUE(uuid.ok()) << uuid.status().message();
  EXPECT_EQ((*uuid)[0].id, "550e8400-e29b-41d4-a716-446655440000");
}

TEST_F(IngestFiles, BadTsvCellsAreNamedByLineAndColumn) {
  auto bad = readAll(write("b.tsv", "1\t2\t3\n1\t2x\t3\n"), {.dim = 3});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("b.tsv:2:3: column 2: '2x' is not a number"),
            std::string::npos)
      << bad.status().message();
  auto extra = readAll(write("e.tsv", "1 2 3 4\n"), {.dim = 3});
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.status().message().find("e.tsv:1:7: column 4: more columns than the dimension 3"),
            std::string::npos)
      << extra.status().message();
  auto few = readAll(write("f.tsv", "1 2 3\n1 2\n"), {.dim = 3});
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("f.tsv:2:4: 2 columns, want 3"), std::string::npos)
      << few.status().message();
  auto inf = readAll(write("i.tsv", "1 inf 3\n"), {.dim = 3});
  ASSERT_FALSE(inf.ok());
  EXPECT_NE(inf.status().message().find("i.tsv:1:3: column 2: 'inf' is not a finite number"),
            std::string::npos)
      << inf.status().message();
  auto id =
      readAll(write("id.tsv", "x 1 2\n"), {.dim = 2, .id_column = ReadOptions::IdColumn::kFirst});
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("id.tsv:1:1: column 1: 'x' is not a point id"),
            std::string::npos)
      << id.status().message();
}

TEST_F(IngestFiles, ReadsJsonLinesWithPayloads) {
  auto j =
      readAll(write("a.jsonl",
                    "{\"id\":5,\"vector\":[1,2],\"payload\":{\"city\":\"Berlin\"}}\n"
                    "\n{\"id\":\"550e8400-e29b-41d4-a716-446655440000\",\"vector\":[3.5,4]}\n"));
  ASSERT_TRUE(j.ok()) << j.status().message();
  ASSERT_EQ(j->size(), 2u);
  EXPECT_EQ((*j)[0].id, 5);
  EXPECT_EQ((*j)[0].payload["city"], "Berlin");
  EXPECT_EQ((*j)[1].line, 3u);
  EXPECT_TRUE((*j)[1].payload.is_null());
  EXPECT_EQ((*j)[1].vector, (std::vector<float>{3.5f, 4}));
}

TEST_F(IngestFiles, BadJsonLinesAreNamedByLineAndColumn) {
  auto broken =
      readAll(write("b.jsonl", "{\"id\":1,\"vector\":[1,2]}\n{\"id\":2,\"vector\":[1,}\n"));
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("b.jsonl:2:"), std::string::npos)
      << broken.status().message();
  EXPECT_NE(broken.status().message().find("not JSON"), std::string::npos);
  auto dim = readAll(write("d.jsonl", "{\"id\":1,\"vector\":[1,2,3]}\n"), {.dim = 2});
  ASSERT_FALSE(dim.ok());
  EXPECT_NE(
      dim.status().message().find("d.jsonl:1:9: \"vector\" has 3 numbers, the dimension is 2"),
      std::string::npos)
      << dim.status().message();
  auto id = readAll(write("i.jsonl", "{\"id\":-1,\"vector\":[1]}\n"));
  ASSERT_FALSE(id.ok());
  EXPECT_NE(
      id.status().message().find("i.jsonl:1:2: \"id\" -1 is not an unsigned integer or a UUID"),
      std::string::npos)
      << id.status().message();
  auto str = readAll(write("s.jsonl", "{\"id\":1,\"vector\":[1,\"2\"]}\n"));
  ASSERT_FALSE(str.ok());
  EXPECT_NE(str.status().message().find("\"vector\"[1] is \"2\", not a number"), std::string::npos);
}

TEST(RetryPolicy, RetryAfterIsHonouredAndBackOffDoublesUpToTheCap) {
  RetryPolicy p;
  p.base_delay = std::chrono::milliseconds(100);
  p.max_delay = std::chrono::milliseconds(1000);
  HttpAnswer a;
  a.status = 429;
  a.retry_after = "2";
  EXPECT_EQ(retryDelay(p, a, 0, 0).count(), 1000);  // capped
  p.max_delay = std::chrono::milliseconds(5000);
  EXPECT_EQ(retryDelay(p, a, 0, 0).count(), 2000);
  a.retry_after_ms = "250";
  EXPECT_EQ(retryDelay(p, a, 3, 0.9).count(), 250);  // the ms header wins, no jitter
  a.retry_after.clear();
  a.retry_after_ms.clear();
  EXPECT_EQ(retryDelay(p, a, 0, 0).count(), 100);
  EXPECT_EQ(retryDelay(p, a, 2, 0).count(), 400);
  EXPECT_EQ(retryDelay(p, a, 20, 0).count(), 5000);
  EXPECT_EQ(retryDelay(p, a, 0, 0.99).count(), 75);  // a quarter of jitter at most
  a.retry_after = "Wed, 21 Oct 2015 07:28:00 GMT";   // an HTTP-date: back-off instead
  EXPECT_EQ(retryDelay(p, a, 1, 0).count(), 200);
}

TEST(RetryPolicy, RetriesOnlyRetryableAnswersAndStopsAtMaxAttempts) {
  RetryPolicy p;
  p.max_attempts = 4;
  std::vector<int64_t> waits;
  p.sleep = [&](std::chrono::milliseconds d) { waits.push_back(d.count()); };
  std::vector<int> answers = {429, 0, 503, 200};
  size_t i = 0;
  int retries = 0;
  HttpAnswer got = callWithRetry(
      p,
      [&] {
        HttpAnswer a;
        a.status = answers[i++];
        if (a.status == 429) a.retry_after = "1";
        return a;
      },
      &retries);
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(retries, 3);
  ASSERT_EQ(waits.size(), 3u);
  EXPECT_EQ(waits[0], 1000);  // retry-after: 1

  i = 0;
  answers = {400, 200};
  got = callWithRetry(p, [&] {
    HttpAnswer a;
    a.status = answers[i++];
    return a;
  });
  EXPECT_EQ(got.status, 400);  // a client error is not retried
  EXPECT_EQ(i, 1u);

  i = 0;
  answers = {503, 503, 503, 503, 503};
  got = callWithRetry(p, [&] {
    HttpAnswer a;
    a.status = answers[i++];
    return a;
  });
  EXPECT_EQ(got.status, 503);
  EXPECT_EQ(i, 4u);
}

TEST(RetryPolicy, ErrorsCarryTheApisMessage) {
  HttpAnswer q{404, R"({"status":{"error":"Not found: Collection `x` doesn't exist!"},"time":0})",
               "", "", ""};
  const Status s = statusFromAnswer(q, "the vector API");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("Collection `x` doesn't exist!"), std::string::npos);
  HttpAnswer o{429, R"({"error":{"message":"Rate limit reached","type":"requests"}})", "", "", ""};
  EXPECT_EQ(statusFromAnswer(o, "gw").code(), StatusCode::kResourceExhausted);
  EXPECT_NE(statusFromAnswer(o, "gw").message().find("Rate limit reached"), std::string::npos);
  HttpAnswer none{0, "", "", "", "connection refused"};
  EXPECT_EQ(statusFromAnswer(none, "gw").code(), StatusCode::kUnavailable);
}

TEST(Pipeline, PrefixesAdvanceInOrderThoughBatchesFinishOutOfOrder) {
  std::mutex mu;
  std::vector<uint64_t> prefixes;
  std::vector<uint64_t> prefix_points;
  std::vector<uint64_t> finish_order;  // as each batch's work ends
  std::atomic<int> running{0}, most{0};
  std::atomic<bool> release_first{false};
  {
    Pipeline pipe(
        3,
        [&](Batch& b) {
          const int now = ++running;
          for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
          }
          // Batch 0 waits until batch 2's work has ended: later batches finish first.
          while (b.seq == 0 && !release_first) std::this_thread::yield();
          --running;
          {
            std::lock_guard lock(mu);
            finish_order.push_back(b.seq);
          }
          if (b.seq == 2) release_first = true;
          return Status::ok();
        },
        [&](const Batch& last, uint64_t points) {
          std::lock_guard lock(mu);
          // A prefix covers only batches whose work has ended, every one of them.
          for (uint64_t s = 0; s <= last.seq; ++s) {
            EXPECT_NE(std::find(finish_order.begin(), finish_order.end(), s), finish_order.end())
                << "prefix through " << last.seq << " covers batch " << s << " still running";
          }
          prefixes.push_back(last.seq);
          prefix_points.push_back(points);
        });
    for (int i = 0; i < 6; ++i) {
      Batch b;
      b.points = 10;
      ASSERT_TRUE(pipe.push(std::move(b)));
    }
    ASSERT_TRUE(pipe.finish().isOk());
    EXPECT_EQ(pipe.donePoints(), 60u);
  }
  EXPECT_LE(most.load(), 3);
  ASSERT_FALSE(prefixes.empty());
  EXPECT_EQ(prefixes.back(), 5u);
  EXPECT_EQ(prefix_points.back(), 60u);
  // Batch 2 ended before batch 0 (out of order), yet no prefix was reported before batch 0's end
  // (the check in the callback); the pipeline may see batch 2's end after batch 0's, so the first
  // prefix covers batch 0 and perhaps 1 and 2.
  const auto at = [&](uint64_t s) {
    return std::find(finish_order.begin(), finish_order.end(), s) - finish_order.begin();
  };
  EXPECT_LT(at(2), at(0));
  for (size_t i = 1; i < prefixes.size(); ++i) EXPECT_LT(prefixes[i - 1], prefixes[i]);
}

TEST(Pipeline, TheFirstFailureStopsWhatIsNotStarted) {
  std::atomic<int> ran{0};
  Pipeline pipe(1, [&](Batch& b) {
    ++ran;
    return b.seq == 1 ? Status::unavailable("down") : Status::ok();
  });
  bool pushed = true;
  for (int i = 0; i < 10 && pushed; ++i) pushed = pipe.push(Batch());
  const Status s = pipe.finish();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_FALSE(pipe.push(Batch()));
  EXPECT_LE(ran.load(), 3);  // batch 1 failed; at most the one queued behind it was already taken
}

TEST(Pipeline, WorkThatThrowsFailsItsBatchInsteadOfEndingTheProcess) {
  Pipeline pipe(2, [&](Batch& b) -> Status {
    if (b.seq == 1) throw std::runtime_error("a bug");
    return Status::ok();
  });
  bool pushed = true;
  for (int i = 0; i < 4 && pushed; ++i) pushed = pipe.push(Batch());
  const Status s = pipe.finish();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("a bug"), std::string::npos) << s.message();
  EXPECT_FALSE(pipe.push(Batch()));
}

}  // namespace
}  // namespace infera::vectors
