// The Files and Batches APIs in one `infera` server in this process, on an injected clock: file
// expiry as OpenAI has it (expires_after on upload, 30 days for batch files by default,
// output_expires_after on a batch; expired files gone for readers at once and deleted by the
// executor's sweep), and a bulk-embedding line whose upsert is refused by the key's rate limit:
// the retry upserts the embedding it has, so the model is asked (and billed) once per line.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/clock.h"
#include "fakes/http_test_client.h"
#include "server/config.h"
#include "server/server.h"

namespace infera::batch {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using testing::httpRequest;
using testing::TestResponse;
using testing::waitFor;

class BatchApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/infera-batch-api-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    ASSERT_NE(d, nullptr);
    dir_ = d;
    const std::string yaml =
        "workers: 2\nlog_level: warn\n"
        "listen: {host: 127.0.0.1, port: 0}\nadmin: {host: 127.0.0.1, port: 0}\n"
        "governance:\n  store: sqlite://" +
        dir_ +
        "/access.db\n  admin_token: tok\n  key_secret: test-secret-0123456789abcdef0123456789\n"
        "  sync_interval_ms: 100\n  usage_flush_ms: 100\n"
        "batch:\n  data_dir: " +
        dir_ +
        "/batch\n  poll_ms: 20\n  max_enqueued_tokens: 3000\n  max_attempts: 20\n"
        "vectors:\n  data_dir: " +
        dir_ +
        "/vectors\n"
        "emulators:\n  e: {models: [m, emb], ttft_ms: 1, token_ms: 0, default_max_tokens: 2, "
        "embedding_dim: 8}\n"
        "models:\n  - name: m\n    deployments: [{endpoints: [{emulator: e}]}]\n"
        "  - name: emb\n    deployments: [{endpoints: [{emulator: e}]}]\n"
        "  - name: down\n    deployments: [{endpoints: [{url: \"http://127.0.0.1:1\"}]}]\n";
    auto cfg = server::loadConfigString(yaml);
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    server::Options o;
    o.clock = &clock_;
    auto s = server::Server::start(std::move(*cfg), {}, o);
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(*s);
    ASSERT_EQ(admin("POST", "/admin/teams", R"({"name":"alpha"})").status, 201);
    key_ = newKey(R"({"team":"alpha"})");
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }

  TestResponse admin(const std::string& method, const std::string& path,
                     const std::string& body = {}) {
    auto r = httpRequest(server_->adminPort(), method, path, body,
                         {{"content-type", "application/json"}, {"authorization", "Bearer tok"}});
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  }
  std::string newKey(const std::string& body) {
    const auto k = admin("POST", "/admin/keys", body);
    EXPECT_EQ(k.status, 201) << k.body;
    return k.status == 201 ? Json::parse(k.body)["key"].get<std::string>() : std::string();
  }
  TestResponse call(const std::string& method, const std::string& path,
                    const std::string& body = {}, const std::string& key = {}) {
    auto r = httpRequest(server_->port(), method, path, body,
                         {{"content-type", "application/json"},
                          {"authorization", "Bearer " + (key.empty() ? key_ : key)}});
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  }
  // A multipart upload with the form fields `fields` (name, value) before the file.
  TestResponse upload(const std::string& content,
                      const std::vector<std::pair<std::string, std::string>>& fields,
                      const std::string& key = {}) {
    const std::string b = "test-boundary-0123456789";
    std::string body;
    for (const auto& [name, value] : fields)
      body += "--" + b + "\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" +
              value + "\r\n";
    body += "--" + b +
            "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n" +
            content + "\r\n--" + b + "--\r\n";
    auto r = httpRequest(server_->port(), "POST", "/v1/files", body,
                         {{"content-type", "multipart/form-data; boundary=" + b},
                          {"authorization", "Bearer " + (key.empty() ? key_ : key)}});
    EXPECT_TRUE(r.has_value());
    return r ? *r : TestResponse{};
  }
  // Creates a chat batch over `file_id` (plus `extra` fields) and answers its id.
  std::string createBatch(const std::string& file_id, Json extra = Json::object(),
                          const std::string& key = {}) {
    extra["input_file_id"] = file_id;
    extra["endpoint"] = extra.value("endpoint", "/v1/chat/completions");
    extra["completion_window"] = "24h";
    const auto r = call("POST", "/v1/batches", extra.dump(), key);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? Json::parse(r.body)["id"].get<std::string>() : std::string();
  }
  static std::string chatLine(const std::string& id) {
    return Json{{"custom_id", id},
                {"method", "POST"},
                {"url", "/v1/chat/completions"},
                {"body", {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", id}}}}}}}
        .dump();
  }
  // Waits for batch `id` to end, advancing the clock by `step` every 100 ms of real time (the
  // executor's turn to send what became due).
  Json waitEnded(const std::string& id, const std::string& key = {},
                 std::chrono::milliseconds step = std::chrono::milliseconds(0)) {
    Json b;
    auto last = std::chrono::steady_clock::now();
    EXPECT_TRUE(waitFor(
        [&] {
          if (std::chrono::steady_clock::now() - last >= std::chrono::milliseconds(100)) {
            last = std::chrono::steady_clock::now();
            clock_.advance(step);
          }
          const auto r = call("GET", "/v1/batches/" + id, {}, key);
          b = Json::parse(r.body, nullptr, false);
          const std::string s = b.is_object() ? b.value("status", "") : "";
          return s == "completed" || s == "failed" || s == "expired" || s == "cancelled";
        },
        std::chrono::seconds(30)))
        << b.dump();
    return b;
  }
  // A counter of the admin port's /metrics with exactly these labels (0 when absent).
  double metric(const std::string& series) {
    const auto r = httpRequest(server_->adminPort(), "GET", "/metrics");
    if (!r) return -1;
    const size_t at = r->body.find("\n" + series + " ");
    return at == std::string::npos ? 0 : std::atof(r->body.c_str() + at + series.size() + 2);
  }
  bool storedOnDisk(const std::string& file_id) {
    for (const auto& e : fs::recursive_directory_iterator(dir_ + "/batch/files"))
      if (e.path().filename().string().find(file_id) != std::string::npos) return true;
    return false;
  }

  FakeClock clock_{FakeClock::AtSystemTime{}};
  std::string dir_;
  std::string key_;
  std::unique_ptr<server::Server> server_;
};

TEST_F(BatchApiTest, FilesExpireAsOpenAIsDoAndTheSweepDeletesThem) {
  const std::string one = chatLine("a") + "\n";
  // A batch file names no expiry: 30 days. Another purpose: kept. expires_after: as given.
  auto r = upload(one, {{"purpose", "batch"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json batch_file = Json::parse(r.body);
  EXPECT_EQ(batch_file["expires_at"], batch_file["created_at"].get<int64_t>() + 2'592'000);
  r = upload(one, {{"purpose", "user_data"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json kept = Json::parse(r.body);
  EXPECT_TRUE(kept["expires_at"].is_null()) << r.body;
  r = upload(one, {{"purpose", "batch"},
                   {"expires_after[anchor]", "created_at"},
                   {"expires_after[seconds]", "3600"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json hour = Json::parse(r.body);
  EXPECT_EQ(hour["expires_at"], hour["created_at"].get<int64_t>() + 3600);

  // Out of range, another anchor, half a policy: 400 in OpenAI's error shape, nothing stored.
  for (const auto& fields : std::vector<std::vector<std::pair<std::string, std::string>>>{
           {{"purpose", "batch"},
            {"expires_after[anchor]", "created_at"},
            {"expires_after[seconds]", "59"}},
           {{"purpose", "batch"},
            {"expires_after[anchor]", "created_at"},
            {"expires_after[seconds]", "2592001"}},
           {{"purpose", "batch"},
            {"expires_after[anchor]", "last_active_at"},
            {"expires_after[seconds]", "3600"}},
           {{"purpose", "batch"}, {"expires_after[seconds]", "3600"}},
           {{"purpose", "batch"},
            {"expires_after[anchor]", "created_at"},
            {"expires_after[seconds]", "36OO"}}}) {
    r = upload(one, fields);
    EXPECT_EQ(r.status, 400) << r.body;
    const Json e = Json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.is_object()) << r.body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find("expires_after"), std::string::npos)
        << r.body;
  }
  const Json listed = Json::parse(call("GET", "/v1/files").body);
  EXPECT_EQ(listed["data"].size(), 3u) << listed.dump();

  // A batch whose output files expire two hours after they are made.
  r = call("POST", "/v1/batches",
           Json{{"input_file_id", batch_file["id"]},
                {"endpoint", "/v1/chat/completions"},
                {"completion_window", "24h"},
                {"output_expires_after", {{"anchor", "created_at"}, {"seconds", 7200}}}}
               .dump());
  ASSERT_EQ(r.status, 200) << r.body;
  // The executor's housekeeping runs on the injected clock: it moves a second at a time.
  const Json done = waitEnded(Json::parse(r.body)["id"], {}, std::chrono::seconds(1));
  ASSERT_EQ(done["status"], "completed") << done.dump();
  const std::string out_id = done["output_file_id"];
  const Json out = Json::parse(call("GET", "/v1/files/" + out_id).body);
  EXPECT_EQ(out["expires_at"], out["created_at"].get<int64_t>() + 7200) << out.dump();
  for (const Json& bad : {Json{{"anchor", "created_at"}, {"seconds", 3600.5}},
                          Json{{"anchor", "created_at"}, {"seconds", "3600"}},
                          Json{{"anchor", "created_at"}}, Json("1h")}) {
    r = call("POST", "/v1/batches",
             Json{{"input_file_id", batch_file["id"]},
                  {"endpoint", "/v1/chat/completions"},
                  {"completion_window", "24h"},
                  {"output_expires_after", bad}}
                 .dump());
    EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body;
    EXPECT_EQ(Json::parse(r.body)["error"]["param"], "output_expires_after") << r.body;
  }

  // An hour on: the one-hour file is gone for every reader at once, then from the disk.
  const std::string hour_id = hour["id"];
  ASSERT_TRUE(storedOnDisk(hour_id));
  clock_.advance(std::chrono::seconds(3601));
  EXPECT_EQ(call("GET", "/v1/files/" + hour_id).status, 404);
  EXPECT_EQ(call("GET", "/v1/files/" + hour_id + "/content").status, 404);
  // Counted once the row and the bytes are gone.
  EXPECT_TRUE(waitFor([&] { return metric("infera_batch_files_expired_total") == 1; },
                      std::chrono::seconds(10)));
  EXPECT_FALSE(storedOnDisk(hour_id));
  std::set<std::string> ids;
  const Json now_listed = Json::parse(call("GET", "/v1/files").body);
  for (const Json& f : now_listed["data"]) ids.insert(f["id"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{out_id, kept["id"], batch_file["id"]}));
  // Two hours after it was made, the output file; thirty days on, the batch's input.
  clock_.advance(std::chrono::seconds(7200));
  EXPECT_EQ(call("GET", "/v1/files/" + out_id).status, 404);
  EXPECT_TRUE(waitFor([&] { return !storedOnDisk(out_id); }, std::chrono::seconds(10)));
  EXPECT_EQ(call("GET", "/v1/files/" + batch_file["id"].get<std::string>()).status, 200);
  clock_.advance(std::chrono::hours(24 * 30));
  EXPECT_TRUE(waitFor([&] { return metric("infera_batch_files_expired_total") == 3; },
                      std::chrono::seconds(10)));
  EXPECT_FALSE(storedOnDisk(batch_file["id"]));
  // The file with no expiry stays.
  EXPECT_EQ(call("GET", "/v1/files/" + kept["id"].get<std::string>()).status, 200);
  EXPECT_TRUE(storedOnDisk(kept["id"]));
  // A batch over an expired file fails as if the file did not exist.
  r = call("POST", "/v1/batches",
           Json{{"input_file_id", hour_id},
                {"endpoint", "/v1/chat/completions"},
                {"completion_window", "24h"}}
               .dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json failed = waitEnded(Json::parse(r.body)["id"], {}, std::chrono::seconds(1));
  EXPECT_EQ(failed["status"], "failed") << failed.dump();
  EXPECT_EQ(failed["errors"]["data"][0]["param"], "file_id") << failed.dump();
}

// An expired file that is the input of a batch still running stays (the executor reads it) until
// the batch ends, and then goes.
TEST_F(BatchApiTest, AnExpiredInputStaysUntilItsBatchEnds) {
  std::string line = Json{{"custom_id", "d"},
                          {"method", "POST"},
                          {"url", "/v1/chat/completions"},
                          {"body", {{"model", "down"}, {"messages", Json::array()}}}}
                         .dump();
  auto r = upload(line + "\n", {{"purpose", "batch"},
                                {"expires_after[anchor]", "created_at"},
                                {"expires_after[seconds]", "3600"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string file = Json::parse(r.body)["id"];
  const std::string id = createBatch(file);
  ASSERT_FALSE(id.empty());
  // Its one line fails to reach the backend and waits for a retry, on the injected clock.
  ASSERT_TRUE(waitFor(
      [&] {
        clock_.advance(std::chrono::milliseconds(50));
        return metric("infera_batch_lines_total{result=\"retried\"}") >= 1;
      },
      std::chrono::seconds(10)));
  const double retried = metric("infera_batch_lines_total{result=\"retried\"}");
  clock_.advance(std::chrono::seconds(3601));
  EXPECT_EQ(call("GET", "/v1/files/" + file).status, 404);
  // A pass of the executor after the jump (housekeeping, then the retry now due) left it.
  ASSERT_TRUE(
      waitFor([&] { return metric("infera_batch_lines_total{result=\"retried\"}") > retried; },
              std::chrono::seconds(10)));
  EXPECT_TRUE(storedOnDisk(file));
  EXPECT_EQ(metric("infera_batch_files_expired_total"), 0);
  ASSERT_EQ(call("POST", "/v1/batches/" + id + "/cancel").status, 200);
  const Json ended = waitEnded(id, {}, std::chrono::seconds(1));
  EXPECT_EQ(ended["status"], "cancelled") << ended.dump();
  EXPECT_TRUE(waitFor(
      [&] {
        clock_.advance(std::chrono::milliseconds(50));
        return metric("infera_batch_files_expired_total") == 1;
      },
      std::chrono::seconds(10)));
  EXPECT_FALSE(storedOnDisk(file));
}

// batch.max_enqueued_tokens (3000 here): a batch whose lines' estimated prompt tokens would take
// the team's batches in progress past it fails validation with token_limit_exceeded, as OpenAI's
// does; once the batch holding them ends, the same file runs.
TEST_F(BatchApiTest, ABatchPastTheTeamsEnqueuedTokenLimitFailsUntilRoomIsMade) {
  auto lineOf = [](const std::string& id, const std::string& model, size_t words) {
    std::string text;
    for (size_t i = 0; i < words; ++i) text += "word ";
    return Json{{"custom_id", id},
                {"method", "POST"},
                {"url", "/v1/chat/completions"},
                {"body", {{"model", model}, {"messages", {{{"role", "user"}, {"content", text}}}}}}}
               .dump() +
           "\n";
  };
  auto create = [&](const std::string& content) {
    auto r = upload(content, {{"purpose", "batch"}});
    EXPECT_EQ(r.status, 200) << r.body;
    const std::string file = Json::parse(r.body)["id"];
    return std::pair<std::string, std::string>(file, createBatch(file));
  };
  // ~2,000 tokens held by a batch whose backend is down (its line waits for a retry).
  const auto [held_file, held] = create(lineOf("big", "down", 1600));
  ASSERT_TRUE(waitFor(
      [&] {
        clock_.advance(std::chrono::milliseconds(50));
        const Json b = Json::parse(call("GET", "/v1/batches/" + held).body);
        return b["status"] == "in_progress";
      },
      std::chrono::seconds(10)));
  // ~1,500 more: past 3,000.
  const std::string more = lineOf("a", "m", 600) + lineOf("b", "m", 600);
  const auto [file, refused] = create(more);
  const Json failed = waitEnded(refused, {}, std::chrono::milliseconds(50));
  ASSERT_EQ(failed["status"], "failed") << failed.dump();
  EXPECT_EQ(failed["errors"]["data"][0]["code"], "token_limit_exceeded") << failed.dump();
  EXPECT_NE(failed["errors"]["data"][0]["message"].get<std::string>().find("limit: 3000"),
            std::string::npos)
      << failed.dump();
  // The held batch ends; the same lines now run.
  ASSERT_EQ(call("POST", "/v1/batches/" + held + "/cancel").status, 200);
  const auto [again_file, again] = create(more);
  const Json done = waitEnded(again, {}, std::chrono::milliseconds(50));
  EXPECT_EQ(done["status"], "completed") << done.dump();
  (void)held_file;
  (void)file;
  (void)again_file;
}

// The key may send one request a minute: a line's embedding takes it, so its upsert is refused
// (429 with retry-after) until a later minute. Retried, the line upserts the vector it already
// has: the model was asked once per line (its prompt tokens billed once), and the batch ends. (A
// retry that asked the model again would find its upsert refused again, minute after minute.)
TEST_F(BatchApiTest, AnUpsertRefusedByTheKeysLimitIsRetriedWithoutEmbeddingAgain) {
  const std::string slow = newKey(R"({"team":"alpha","rpm":1})");
  ASSERT_EQ(call("PUT", "/collections/items", R"({"vectors":{"size":8,"distance":"Dot"}})").status,
            200);
  std::string lines;
  for (int i = 0; i < 3; ++i) {
    lines += Json{{"custom_id", "item-" + std::to_string(i)},
                  {"method", "POST"},
                  {"url", "/v1/embeddings"},
                  {"body", {{"model", "emb"}, {"input", "text " + std::to_string(i)}}},
                  {"point_id", i}}
                 .dump() +
             "\n";
  }
  auto r = upload(lines, {{"purpose", "batch"}}, slow);
  ASSERT_EQ(r.status, 200) << r.body;
  r = call("POST", "/v1/batches",
           Json{{"input_file_id", Json::parse(r.body)["id"]},
                {"endpoint", "/v1/embeddings"},
                {"completion_window", "24h"},
                {"vector_collection", "items"}}
               .dump(),
           slow);
  ASSERT_EQ(r.status, 200) << r.body;
  // A minute at a time: the lines take their minutes in turn (six requests in all).
  const Json done = waitEnded(Json::parse(r.body)["id"], slow, std::chrono::seconds(61));
  ASSERT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["request_counts"]["completed"], 3) << done.dump();
  const auto count = call("POST", "/collections/items/points/count", R"({"exact":true})");
  EXPECT_EQ(Json::parse(count.body)["result"]["count"], 3) << count.body;
  EXPECT_GE(metric("infera_batch_lines_total{result=\"retried\"}"), 3);
  // The gateway billed the prompt tokens the batch counted: each line's, once.
  const int64_t tokens = done["usage"]["input_tokens"];
  EXPECT_GT(tokens, 0);
  EXPECT_EQ(metric("infera_usage_tokens_total{team=\"alpha\",model=\"emb\",kind=\"prompt\"}"),
            tokens);
}

}  // namespace
}  // namespace infera::batch
