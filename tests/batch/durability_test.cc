// Batches survive what kills processes: `infera serve` killed with SIGKILL in the middle of a
// 10,000-line batch on SQLite and restarted; and two replicas sharing one batch through
// PostgreSQL while one of them is killed and restarted. Every line is answered exactly once in the
// output, and the restarted process resumes where the batch stood (it does not start again).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "fakes/http_test_client.h"
#include "fakes/servers.h"

namespace infera {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using testing::httpRequest;
using testing::ServeProcess;
using testing::waitFor;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/infera-batch-dur-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string chatLines(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += Json{{"custom_id", "line-" + std::to_string(i)},
                {"method", "POST"},
                {"url", "/v1/chat/completions"},
                {"body",
                 {{"model", "m"},
                  {"max_tokens", 1},
                  {"messages", {{{"role", "user"}, {"content", "q" + std::to_string(i)}}}}}}}
               .dump();
    out += '\n';
  }
  return out;
}

std::string uploadFile(uint16_t port, const std::string& content) {
  const std::string boundary = "test-boundary-0123456789";
  const std::string body =
      "--" + boundary + "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--" +
      boundary +
      "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\n" +
      content + "\r\n--" + boundary + "--\r\n";
  auto r = httpRequest(port, "POST", "/v1/files", body,
                       {{"content-type", "multipart/form-data; boundary=" + boundary}});
  if (!r || r->status != 200) {
    ADD_FAILURE() << "upload: " << (r ? r->body : "no answer");
    return {};
  }
  return Json::parse(r->body)["id"].get<std::string>();
}

// Embedding lines whose vectors go into a collection as point i (issue 39's bulk embedding).
std::string embeddingLines(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += Json{{"custom_id", "line-" + std::to_string(i)},
                {"method", "POST"},
                {"url", "/v1/embeddings"},
                {"body", {{"model", "m"}, {"input", "item " + std::to_string(i)}}},
                {"point_id", i},
                {"payload", {{"n", i}}}}
               .dump();
    out += '\n';
  }
  return out;
}

std::string createBatch(uint16_t port, const std::string& file_id,
                        const std::string& endpoint = "/v1/chat/completions",
                        const std::string& collection = "") {
  Json req = {{"input_file_id", file_id}, {"endpoint", endpoint}, {"completion_window", "24h"}};
  if (!collection.empty()) req["vector_collection"] = collection;
  const std::string body = req.dump();
  auto r = httpRequest(port, "POST", "/v1/batches", body, {{"content-type", "application/json"}});
  if (!r || r->status != 200) {
    ADD_FAILURE() << "create: " << (r ? r->body : "no answer");
    return {};
  }
  return Json::parse(r->body)["id"].get<std::string>();
}

Json batchOf(uint16_t port, const std::string& id) {
  auto r = httpRequest(port, "GET", "/v1/batches/" + id);
  if (!r || r->status != 200) return Json::object();
  return Json::parse(r->body);
}

int64_t completed(const Json& b) {
  return b.contains("request_counts") ? b["request_counts"]["completed"].get<int64_t>() : -1;
}

// infera_batch_lines_total{result="ok"} of a process.
int64_t linesOk(uint16_t admin_port) {
  auto r = httpRequest(admin_port, "GET", "/metrics");
  if (!r) return -1;
  const std::string key = "infera_batch_lines_total{result=\"ok\"} ";
  const size_t at = r->body.find(key);
  return at == std::string::npos ? 0 : std::atoll(r->body.c_str() + at + key.size());
}

// The output file: every custom_id exactly once, all answered 200.
void expectEveryLineOnce(uint16_t port, const Json& batch, int n) {
  ASSERT_EQ(batch["status"], "completed") << batch.dump();
  EXPECT_EQ(batch["request_counts"]["total"], n);
  EXPECT_EQ(batch["request_counts"]["completed"], n);
  EXPECT_EQ(batch["request_counts"]["failed"], 0);
  auto r = httpRequest(port, "GET",
                       "/v1/files/" + batch["output_file_id"].get<std::string>() + "/content");
  ASSERT_TRUE(r && r->status == 200);
  std::set<std::string> ids;
  size_t lines = 0, start = 0;
  while (start < r->body.size()) {
    size_t end = r->body.find('\n', start);
    if (end == std::string::npos) end = r->body.size();
    const Json line = Json::parse(r->body.substr(start, end - start));
    ++lines;
    ids.insert(line["custom_id"].get<std::string>());
    EXPECT_EQ(line["response"]["status_code"], 200);
    start = end + 1;
  }
  EXPECT_EQ(lines, static_cast<size_t>(n));  // no line twice
  EXPECT_EQ(ids.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; i += 997) EXPECT_TRUE(ids.contains("line-" + std::to_string(i)));
}

std::string config(const std::string& dir, const std::string& store,
                   const std::string& extra = "") {
  return extra +
         "listen: {host: 127.0.0.1, port: 0}\n"
         "admin: {host: 127.0.0.1, port: 0}\n"
         "workers: 2\n"
         "log_level: warn\n"
         "emulators:\n"
         "  e: {models: [m], ttft_ms: 4, token_ms: 0, default_max_tokens: 1}\n"
         "models:\n"
         "  - name: m\n"
         "    deployments: [{endpoints: [{emulator: e}]}]\n"
         "batch:\n"
         "  store: \"" +
         store +
         "\"\n"
         "  file_dir: " +
         dir +
         "/files\n"
         "  concurrency: 8\n"
         "  chunk_lines: 250\n"
         "  lease_ms: 1000\n"
         "  poll_ms: 50\n";
}

std::string writeConfig(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// `infera serve` on `cfg` runs batch `id` (created on `first`, `n` lines) until `kill_at` lines
// are recorded, is killed with SIGKILL, and a restarted process finishes it: every line once in
// the output, and the restarted process answered at most what was left (it resumed). The
// restarted process is returned.
std::unique_ptr<ServeProcess> killNineAndResume(std::unique_ptr<ServeProcess> first,
                                                const std::string& cfg, const std::string& dir,
                                                const std::string& id, int n, int64_t kill_at) {
  int64_t at_kill = 0;
  EXPECT_TRUE(waitFor(
      [&] {
        at_kill = completed(batchOf(first->port(), id));
        return at_kill >= kill_at;
      },
      std::chrono::seconds(60)));
  first->kill9();
  EXPECT_LT(at_kill, n) << "the batch ended before the kill: make it longer";
  auto second = ServeProcess::start(INFERA_CLI, cfg, dir + "/second.log");
  if (second == nullptr) {
    ADD_FAILURE() << "the restart failed";
    return second;
  }
  Json b;
  EXPECT_TRUE(waitFor(
      [&] {
        b = batchOf(second->port(), id);
        return b.value("status", "") == "completed";
      },
      std::chrono::seconds(120)))
      << b.dump();
  expectEveryLineOnce(second->port(), b, n);
  const int64_t redone = linesOk(second->adminPort());
  EXPECT_GT(redone, 0);
  EXPECT_LE(redone, n - at_kill);
  return second;
}

TEST(BatchDurability, KillNineMidBatchOnSqliteThenRestartAnswersEveryLineOnce) {
  TempDir dir;
  const std::string cfg =
      writeConfig(dir.path() + "/gw.yaml", config(dir.path(), "sqlite:" + dir.path() + "/b.db"));
  auto first = ServeProcess::start(INFERA_CLI, cfg, dir.path() + "/first.log");
  ASSERT_NE(first, nullptr);
  const int n = 10'000;
  const std::string file = uploadFile(first->port(), chatLines(n));
  const std::string id = createBatch(first->port(), file);
  ASSERT_FALSE(id.empty());
  // Killed once a good share is recorded, and well before the end.
  killNineAndResume(std::move(first), cfg, dir.path(), id, n, 1500);
}

// A batch into a vector collection: each vector is upserted before its line counts, so after a
// kill -9 and a restart every line is answered once and every point is in the collection.
TEST(BatchDurability, KillNineMidVectorBatchThenRestartLeavesEveryPointInTheCollection) {
  TempDir dir;
  const std::string cfg = writeConfig(dir.path() + "/gw.yaml",
                                      config(dir.path(), "sqlite:" + dir.path() + "/b.db",
                                             "vectors: {data_dir: " + dir.path() + "/vectors}\n"));
  auto first = ServeProcess::start(INFERA_CLI, cfg, dir.path() + "/first.log");
  ASSERT_NE(first, nullptr);
  auto made = httpRequest(first->port(), "PUT", "/collections/items",
                          R"({"vectors":{"size":16,"distance":"Dot"}})",
                          {{"content-type", "application/json"}});
  ASSERT_TRUE(made && made->status == 200) << (made ? made->body : "no answer");
  const int n = 5'000;
  const std::string file = uploadFile(first->port(), embeddingLines(n));
  const std::string id = createBatch(first->port(), file, "/v1/embeddings", "items");
  ASSERT_FALSE(id.empty());
  auto second = killNineAndResume(std::move(first), cfg, dir.path(), id, n, 800);
  ASSERT_NE(second, nullptr);
  auto count = httpRequest(second->port(), "POST", "/collections/items/points/count",
                           R"({"exact":true})", {{"content-type", "application/json"}});
  ASSERT_TRUE(count && count->status == 200);
  EXPECT_EQ(Json::parse(count->body)["result"]["count"], n) << count->body;
  auto some = httpRequest(second->port(), "POST", "/collections/items/points",
                          R"({"ids":[0,2500,4999],"with_payload":true})",
                          {{"content-type", "application/json"}});
  ASSERT_TRUE(some && some->status == 200);
  const Json points = Json::parse(some->body);  // named: a loop over a temporary's member dangles
  ASSERT_EQ(points["result"].size(), 3u) << some->body;
  for (const auto& p : points["result"]) EXPECT_EQ(p["payload"]["n"], p["id"]);
}

TEST(BatchDurability, TwoReplicasOnPostgresShareABatchWhileOneIsKilled) {
  auto pg = testing::PostgresServer::start();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->createDatabase("batches"));
  TempDir dir;
  const std::string cfg =
      writeConfig(dir.path() + "/gw.yaml", config(dir.path(), pg->url("batches")));
  auto a = ServeProcess::start(INFERA_CLI, cfg, dir.path() + "/a.log");
  auto b = ServeProcess::start(INFERA_CLI, cfg, dir.path() + "/b.log");
  ASSERT_TRUE(a != nullptr && b != nullptr);
  const int n = 6'000;
  const std::string file = uploadFile(a->port(), chatLines(n));
  const std::string id = createBatch(a->port(), file);
  ASSERT_FALSE(id.empty());
  // Both replicas take chunks of it.
  ASSERT_TRUE(waitFor([&] { return linesOk(a->adminPort()) > 0 && linesOk(b->adminPort()) > 0; },
                      std::chrono::seconds(60)));
  // One of them dies in the middle of its chunks; they are taken over when its leases run out.
  b->kill9();
  EXPECT_LT(completed(batchOf(a->port(), id)), n);
  auto b2 = ServeProcess::start(INFERA_CLI, cfg, dir.path() + "/b2.log");
  ASSERT_NE(b2, nullptr);
  Json got;
  ASSERT_TRUE(waitFor(
      [&] {
        got = batchOf(b2->port(), id);
        return got.value("status", "") == "completed";
      },
      std::chrono::seconds(120)))
      << got.dump();
  expectEveryLineOnce(a->port(), got, n);
}

}  // namespace
}  // namespace infera
