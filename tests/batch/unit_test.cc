// The batch component's parts on their own: the streaming multipart reader, the line reader over
// files, completion windows, and the store's claims and records (two connections on one SQLite
// file, as two replicas would hold them).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "batch/batch.h"
#include "batch/internal/files.h"
#include "batch/internal/multipart.h"
#include "batch/internal/store.h"

namespace infera::batch {
namespace {

namespace fs = std::filesystem;

struct Part {
  PartHead head;
  std::string data;
  bool ended = false;
};

// Feeds `body` in pieces of the given sizes (the last piece takes the rest).
Result<std::vector<Part>> readParts(const std::string& boundary, const std::string& body,
                                    std::vector<size_t> cuts) {
  std::vector<Part> parts;
  MultipartReader::Sink sink;
  sink.begin = [&](const PartHead& h) {
    parts.push_back(Part{h, "", false});
    return Status::ok();
  };
  sink.data = [&](std::string_view d) {
    parts.back().data.append(d);
    return Status::ok();
  };
  sink.end = [&] {
    parts.back().ended = true;
    return Status::ok();
  };
  MultipartReader r(boundary, sink);
  size_t at = 0;
  for (size_t c : cuts) {
    INFERA_RETURN_IF_ERROR(r.feed(std::string_view(body).substr(at, c - at)));
    at = c;
  }
  INFERA_RETURN_IF_ERROR(r.feed(std::string_view(body).substr(at)));
  INFERA_RETURN_IF_ERROR(r.finish());
  return parts;
}

const std::string kBoundary = "form-data-boundary-abc123";
// The file holds text that starts like the delimiter but is not it.
const std::string kFile = "line one\r\n--form-data-boundary-abc12 not quite\r\n--\r\nlast";
const std::string kBody =
    "--" + kBoundary +
    "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
    "--" +
    kBoundary +
    "\r\nContent-Disposition: form-data; name=\"file\"; "
    "filename=\"in.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n" +
    kFile + "\r\n--" + kBoundary + "--\r\n\r\n";

TEST(Multipart, ThePartsAreTheSameWhereverTheBodyIsCut) {
  for (size_t i = 0; i <= kBody.size(); ++i) {
    for (size_t j = i; j <= kBody.size(); j += 7) {
      auto parts = readParts(kBoundary, kBody, {i, j});
      ASSERT_TRUE(parts.ok()) << "cut at " << i << "," << j << ": " << parts.status().message();
      ASSERT_EQ(parts->size(), 2u);
      EXPECT_EQ((*parts)[0].head.name, "purpose");
      EXPECT_EQ((*parts)[0].data, "batch");
      EXPECT_EQ((*parts)[1].head.name, "file");
      EXPECT_EQ((*parts)[1].head.filename, "in.jsonl");
      EXPECT_EQ((*parts)[1].head.content_type, "application/octet-stream");
      ASSERT_EQ((*parts)[1].data, kFile) << "cut at " << i << "," << j;
      EXPECT_TRUE((*parts)[1].ended);
    }
  }
}

TEST(Multipart, MalformedBodiesAreRefused) {
  // No closing delimiter: the body ended inside the file.
  EXPECT_FALSE(readParts(kBoundary, kBody.substr(0, kBody.size() - 10), {}).ok());
  // A part without Content-Disposition, and one without a name.
  EXPECT_FALSE(
      readParts(kBoundary, "--" + kBoundary + "\r\nX: y\r\n\r\nz\r\n--" + kBoundary + "--", {})
          .ok());
  EXPECT_FALSE(readParts(kBoundary,
                         "--" + kBoundary + "\r\nContent-Disposition: form-data\r\n\r\nz\r\n--" +
                             kBoundary + "--",
                         {})
                   .ok());
  // Headers that never end.
  EXPECT_FALSE(readParts(kBoundary, "--" + kBoundary + "\r\n" + std::string(20000, 'h'), {}).ok());
  // No boundary anywhere.
  EXPECT_FALSE(readParts(kBoundary, std::string(20000, 'x'), {}).ok());
  // The content type.
  EXPECT_EQ(*multipartBoundary("multipart/form-data; boundary=\"a b\""), "a b");
  EXPECT_EQ(*multipartBoundary("Multipart/Form-Data;boundary=xyz"), "xyz");
  EXPECT_FALSE(multipartBoundary("application/json").ok());
  EXPECT_FALSE(multipartBoundary("multipart/form-data").ok());
  EXPECT_FALSE(multipartBoundary("multipart/form-data; boundary=" + std::string(71, 'a')).ok());
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/infera-batch-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(LineReader, LinesOffsetsAndOverlongLines) {
  TempDir dir;
  FileDir files(dir.path());
  ASSERT_TRUE(files.init().isOk());
  auto w = files.create("f1");
  ASSERT_TRUE(w.ok());
  const std::string text = "a\r\n\nbb\n" + std::string(5000, 'x') + "\ncc\ndd";
  ASSERT_TRUE(files.append(**w, text, 1 << 20).isOk());
  auto cm = files.commit(**w);
  ASSERT_TRUE(cm.ok());
  EXPECT_EQ(cm->size, static_cast<int64_t>(text.size()));
  EXPECT_EQ(cm->sha256.size(), 64u);
  auto r = files.open("f1");
  ASSERT_TRUE(r.ok());
  LineReader lines(**r, 0, 100);
  std::string line;
  std::vector<std::pair<std::string, int64_t>> got;
  int errors = 0;
  for (;;) {
    auto more = lines.next(line);
    if (!more.ok()) {
      ++errors;
      continue;
    }
    if (!*more) break;
    got.emplace_back(line, lines.offset());
  }
  EXPECT_EQ(errors, 1);  // the 5000-byte line, skipped whole
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"a", 0}, {"", 3}, {"bb", 4}, {"cc", 5008}, {"dd", 5011}};
  EXPECT_EQ(got, want);
  // From an offset, as a chunk starts.
  LineReader from(**r, 5008, 100);
  ASSERT_TRUE(*from.next(line));
  EXPECT_EQ(line, "cc");
  // Past the limit, append refuses and the file never appears.
  auto w2 = files.create("f2");
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ(files.append(**w2, std::string(10, 'z'), 5).code(), StatusCode::kPayloadTooLarge);
  w2->reset();
  EXPECT_FALSE(files.open("f2").ok());
}

TEST(FileDir, AKilledUploadsLeftoverIsRemovedOnceStaleAndALiveOneIsNot) {
  TempDir dir;
  const std::string stale = dir.path() + "/.tmp-file-a-1", live = dir.path() + "/.tmp-file-b-2";
  std::ofstream(stale) << "half";
  std::ofstream(live) << "half";
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(2));
  FileDir files(dir.path());
  ASSERT_TRUE(files.init().isOk());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
}

TEST(Window, Parsing) {
  EXPECT_EQ(*parseWindow("24h"), 86'400'000);
  EXPECT_EQ(*parseWindow("90m"), 5'400'000);
  for (const char* bad : {"", "h", "24", "24d", "-1h", "0h", "1000h", "1.5h"})
    EXPECT_FALSE(parseWindow(bad).ok()) << bad;
}

BatchRow newBatch(const std::string& id, int64_t now) {
  BatchRow b;
  b.id = id;
  b.team = "t";
  b.endpoint = "/v1/chat/completions";
  b.input_file_id = "file-x";
  b.completion_window = "24h";
  b.status = "validating";
  b.created_ms = now;
  b.expires_ms = now + 86'400'000;
  return b;
}

TEST(Store, ChunksAreClaimedByOneRunnerAndAnswersRecordedOnce) {
  TempDir dir;
  const std::string url = "sqlite:" + dir.path() + "/b.db";
  auto one = BatchStore::open(url);
  auto two = BatchStore::open(url);
  ASSERT_TRUE(one.ok() && two.ok());
  ASSERT_TRUE((*one)->migrate().isOk());
  const int64_t now = 1'000'000;
  ASSERT_TRUE((*one)->insertBatch(newBatch("batch_1", now)).isOk());
  // Validation is claimed once.
  auto v1 = (*one)->claimValidation("r1", now, 1000);
  auto v2 = (*two)->claimValidation("r2", now, 1000);
  ASSERT_TRUE(v1.ok() && v2.ok());
  EXPECT_TRUE(v1->has_value());
  EXPECT_FALSE(v2->has_value());
  ASSERT_TRUE((*one)
                  ->startBatch("batch_1", "r1",
                               {{"batch_1", 0, 1, 2, 0}, {"batch_1", 1, 3, 2, 100}}, 4, now)
                  .isOk());
  // Two chunks, two runners: each gets one, and a third claim finds nothing.
  auto c1 = (*one)->claimChunk("r1", now, 1000);
  auto c2 = (*two)->claimChunk("r2", now, 1000);
  ASSERT_TRUE(c1.ok() && c2.ok() && c1->has_value() && c2->has_value());
  EXPECT_NE((*c1)->chunk, (*c2)->chunk);
  EXPECT_FALSE((*(*one)->claimChunk("r1", now, 1000)).has_value());
  // Not finalizable while chunks are open.
  EXPECT_FALSE((*(*one)->claimFinalize("r1", now, 1000)).has_value());
  // r2 dies; after its lease runs out r1 (which renewed its own) takes r2's chunk over, and r2's
  // renewal fails.
  ASSERT_TRUE(*(*one)->renewChunk(**c1, "r1", now + 3000));
  auto taken = (*one)->claimChunk("r1", now + 1001, 1000);
  ASSERT_TRUE(taken.ok() && taken->has_value());
  EXPECT_EQ((*taken)->chunk, (*c2)->chunk);
  EXPECT_FALSE(*(*two)->renewChunk(**c2, "r2", now + 5000));
  EXPECT_TRUE(*(*one)->renewChunk(**taken, "r1", now + 5000));
  // Both answer line 3 (the slow one came back after all): it is kept once, counted once.
  LineResult a{3, true, "{\"custom_id\":\"a\"}", 5, 2};
  LineResult a2{3, false, "{\"custom_id\":\"late\"}", 9, 9};
  LineResult b{4, false, "{\"custom_id\":\"b\"}", 1, 0};
  ASSERT_TRUE((*one)->record("batch_1", {a, b}).isOk());
  ASSERT_TRUE((*two)->record("batch_1", {a2}).isOk());
  auto row = (*one)->batch("batch_1");
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->completed, 1);
  EXPECT_EQ((*row)->failed, 1);
  EXPECT_EQ((*row)->prompt_tokens, 6);
  auto results = (*one)->results("batch_1", 0, 10, 1 << 20);
  ASSERT_TRUE(results.ok());
  ASSERT_EQ(results->size(), 2u);
  EXPECT_EQ((*results)[0].line_json, "{\"custom_id\":\"a\"}");
  EXPECT_EQ(*(*one)->recordedLines("batch_1", 3, 4), (std::vector<int64_t>{3, 4}));
  // Both chunks done: the batch can be finalized, by one runner.
  ASSERT_TRUE((*one)->releaseChunk(**c1, "r1", true).isOk());
  ASSERT_TRUE((*one)->releaseChunk(**taken, "r1", true).isOk());
  auto f1 = (*one)->claimFinalize("r1", now + 2000, 1000);
  auto f2 = (*two)->claimFinalize("r2", now + 2000, 1000);
  ASSERT_TRUE(f1.ok() && f2.ok());
  EXPECT_TRUE(f1->has_value());
  EXPECT_FALSE(f2->has_value());
  EXPECT_EQ((**f1).status, "finalizing");
  // Only the finalizer that holds it may finish it.
  EXPECT_FALSE((*two)->finishBatch("batch_1", "r2", "completed", "file-x", "", 0, now).isOk());
  ASSERT_TRUE(
      (*one)->finishBatch("batch_1", "r1", "completed", "file-o", "", 0, now + 2100).isOk());
  EXPECT_EQ((*(*one)->batch("batch_1"))->status, "completed");
  // A completed batch cannot be cancelled.
  EXPECT_EQ((*one)->cancel("batch_1", now).status().code(), StatusCode::kFailedPrecondition);
}

TEST(Store, ValidationIsFencedAndResultsArePagedByBytes) {
  TempDir dir;
  auto s = BatchStore::open("sqlite:" + dir.path() + "/b.db");
  ASSERT_TRUE(s.ok() && (*s)->migrate().isOk());
  const int64_t now = 1'000'000;
  ASSERT_TRUE((*s)->insertBatch(newBatch("batch_3", now)).isOk());
  ASSERT_TRUE((*(*s)->claimValidation("slow", now, 1000)).has_value());
  // The slow validator's lease runs out; another takes the validation over and finishes it.
  ASSERT_TRUE((*(*s)->claimValidation("fast", now + 1001, 1000)).has_value());
  EXPECT_FALSE(*(*s)->renewBatch("batch_3", "slow", now + 5000));
  ASSERT_TRUE((*s)->startBatch("batch_3", "fast", {{"batch_3", 0, 1, 3, 0}}, 3, now).isOk());
  // The slow one's end changes nothing.
  EXPECT_FALSE((*s)->startBatch("batch_3", "slow", {}, 0, now).isOk());
  ASSERT_TRUE((*s)->failBatch("batch_3", "slow", "[]", now).isOk());
  EXPECT_EQ((*(*s)->batch("batch_3"))->status, "in_progress");
  EXPECT_EQ((*(*s)->batch("batch_3"))->total, 3);
  // Three answers of 1,000 bytes: pages of at most 2,500 bytes hold two, then one (and a single
  // answer larger than the page still comes, alone).
  std::vector<LineResult> rs;
  for (int64_t i = 1; i <= 3; ++i) rs.push_back({i, true, std::string(1000, 'x'), 0, 0});
  ASSERT_TRUE((*s)->record("batch_3", rs).isOk());
  EXPECT_EQ((*s)->results("batch_3", 0, 100, 2500)->size(), 2u);
  EXPECT_EQ((*s)->results("batch_3", 2, 100, 2500)->size(), 1u);
  EXPECT_EQ((*s)->results("batch_3", 0, 100, 10)->size(), 1u);
  EXPECT_TRUE((*s)->results("batch_3", 3, 100, 2500)->empty());
}

TEST(Store, ACancelledBatchIsFinalizedOnceNoChunkIsLeased) {
  TempDir dir;
  auto s = BatchStore::open("sqlite:" + dir.path() + "/b.db");
  ASSERT_TRUE(s.ok() && (*s)->migrate().isOk());
  const int64_t now = 1'000'000;
  ASSERT_TRUE((*s)->insertBatch(newBatch("batch_2", now)).isOk());
  ASSERT_TRUE((*(*s)->claimValidation("r1", now, 1000)).has_value());
  ASSERT_TRUE((*s)->startBatch("batch_2", "r1", {{"batch_2", 0, 1, 5, 0}}, 5, now).isOk());
  auto c = (*s)->claimChunk("r1", now, 1000);
  ASSERT_TRUE(c.ok() && c->has_value());
  auto cancelled = (*s)->cancel("batch_2", now);
  ASSERT_TRUE(cancelled.ok() && cancelled->has_value());
  EXPECT_EQ((**cancelled).status, "cancelling");
  EXPECT_EQ(*(*s)->ending("batch_2"), "cancelled");
  // The chunk is still leased: not yet.
  EXPECT_FALSE((*(*s)->claimFinalize("r1", now + 10, 1000)).has_value());
  // Given back: now.
  ASSERT_TRUE((*s)->releaseChunk(**c, "r1", false).isOk());
  auto f = (*s)->claimFinalize("r1", now + 20, 1000);
  ASSERT_TRUE(f.ok() && f->has_value());
  EXPECT_EQ((**f).ending, "cancelled");
  // No further chunk is handed out for it.
  EXPECT_FALSE((*(*s)->claimChunk("r2", now + 5000, 1000)).has_value());
}

}  // namespace
}  // namespace infera::batch
