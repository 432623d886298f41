// Access control through its public header only (access/access.h), as the gateway and the next
// components use it: authenticate a key into a principal, check a resource, admit (reserve) and
// finish (settle), with time stepped on a FakeClock instead of waited for.
#include "access/access.h"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "access/internal/keys.h"
#include "obs/metrics.h"

namespace infera::access {
namespace {

constexpr const char* kSecret = "api-test-secret-0123456789abcdef0123456789";

std::string tempStore() {
  char tmpl[] = "/tmp/infera-access-api-XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  return std::string("sqlite:") + (dir ? dir : "/tmp") + "/access.db";
}

// Runs a coroutine on `ctx` (this thread) to its end.
template <typename T>
T run(net::asio::io_context& ctx, net::Task<T> task) {
  std::optional<T> out;
  net::asio::co_spawn(ctx, std::move(task), [&out](std::exception_ptr e, T v) {
    if (e) std::rethrow_exception(e);
    out = std::move(v);
  });
  ctx.restart();
  ctx.run();
  EXPECT_TRUE(out.has_value());
  return std::move(*out);
}

class AccessApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("INFERA_ADMIN_TOKEN");
    ::unsetenv("INFERA_KEY_SECRET");
    store_ = tempStore();
    // A team of 2 requests and 100 tokens a minute, and a key of it, written before access starts.
    auto st = MetaStore::open(store_, clock_);
    ASSERT_TRUE(st.ok()) << st.status().message();
    TeamRecord team;
    team.name = "ml";
    team.rpm = 2;
    team.tpm = 100;
    team.models = {"llama*"};
    ASSERT_TRUE((*st)->createTeam(team, "test").isOk());
    KeyRecord key;
    key.team = "ml";
    auto token = (*st)->createKey(key, kSecret, "test");
    ASSERT_TRUE(token.ok()) << token.status().message();
    token_ = "Bearer " + *token;
    key_id_ = key.id;

    AccessConfig cfg;
    cfg.enabled = true;
    cfg.store = store_;
    cfg.key_secret = kSecret;
    cfg.admin_token = "admin";
    auto a = Access::start(cfg, metrics_, 1, clock_);
    ASSERT_TRUE(a.ok()) << a.status().message();
    access_ = std::move(*a);
    worker_ = access_->worker(0, ctx_);
    model_.limits = {1000, 100000};
    model_.req = "m:llama:r";
    model_.tok = "m:llama:t";
  }
  void TearDown() override {
    worker_.reset();
    access_.reset();
    std::filesystem::remove_all(std::filesystem::path(store_.substr(7)).parent_path());
  }

  std::optional<Denial> admit(Grant& g, int64_t prompt, int64_t completion) {
    AdmitRequest r;
    r.resource = &model_;
    r.est_prompt_tokens = prompt;
    r.max_completion_tokens = completion;
    headers_.clear();
    return run(ctx_, worker_->admit(g, r, headers_));
  }
  void finish(Grant& g, int64_t prompt, int64_t completion) {
    UsageRecord u;
    u.model = "llama";
    u.status = 200;
    u.prompt_tokens = prompt;
    u.completion_tokens = completion;
    worker_->finish(g, std::move(u), {});
  }
  std::string header(const std::string& name) const {
    for (const auto& h : headers_) {
      if (h.name == name) return h.value;
    }
    return "";
  }

  FakeClock clock_{FakeClock::AtSystemTime{}};
  obs::MetricsRegistry metrics_{1};
  net::asio::io_context ctx_;
  std::string store_;
  std::string token_;
  std::string key_id_;
  std::unique_ptr<Access> access_;
  std::unique_ptr<AccessWorker> worker_;
  LimitedResource model_;
  std::vector<net::HttpHeader> headers_;
};

TEST_F(AccessApiTest, AuthenticatesAKeyIntoItsPrincipalAndRefusesOthers) {
  Grant g;
  EXPECT_FALSE(g);
  ASSERT_EQ(worker_->authenticate(token_, "", g), std::nullopt);
  ASSERT_TRUE(g);
  EXPECT_EQ(g.principal().team, "ml");
  EXPECT_EQ(g.principal().key_id, key_id_);

  Grant none;
  const auto missing = worker_->authenticate("", "", none);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 401);
  EXPECT_EQ(missing->code, "missing_api_key");
  EXPECT_FALSE(none);
  const auto wrong = worker_->authenticate(token_ + "x", "", none);
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->code, "invalid_api_key");
  EXPECT_FALSE(none);
  // A key that may not name a user is refused when it does.
  const auto user = worker_->authenticate(token_, "ann", none);
  ASSERT_TRUE(user);
  EXPECT_EQ(user->status, 403);
}

// governance.admin_token_file: created with a random token (mode 0600, its directory too) at the
// first start, read back at the next; the admin API takes that token and nothing else.
TEST_F(AccessApiTest, TheAdminTokenFileIsCreatedOnceAndRead) {
  const std::string dir = std::filesystem::path(store_.substr(7)).parent_path().string();
  AccessConfig cfg;
  cfg.enabled = true;
  cfg.store = store_;
  cfg.key_secret = kSecret;
  cfg.admin_token_file = dir + "/secrets/admin-token";
  std::string first;
  {
    obs::MetricsRegistry once{1};
    auto a = Access::start(cfg, once, 1, clock_);
    ASSERT_TRUE(a.ok()) << a.status().message();
    std::ifstream in(cfg.admin_token_file);
    ASSERT_TRUE(std::getline(in, first));
    EXPECT_GE(first.size(), 32u);
    struct stat st {};
    ASSERT_EQ(::stat(cfg.admin_token_file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_FALSE((*a)->refuseAdmin("Bearer " + first));
    EXPECT_TRUE((*a)->refuseAdmin("Bearer admin"));
    EXPECT_TRUE((*a)->refuseAdmin(""));
  }
  obs::MetricsRegistry again{1};
  auto b = Access::start(cfg, again, 1, clock_);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_FALSE((*b)->refuseAdmin("Bearer " + first));  // the same token: read, not made again
  // An empty file is refused, naming the key.
  std::ofstream(cfg.admin_token_file, std::ios::trunc) << "\n";
  obs::MetricsRegistry third{1};
  auto c = Access::start(cfg, third, 1, clock_);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("governance.admin_token_file"), std::string::npos)
      << c.status().message();
}

TEST_F(AccessApiTest, ChecksTheTeamsModelList) {
  Grant g;
  ASSERT_EQ(worker_->authenticate(token_, "", g), std::nullopt);
  EXPECT_EQ(worker_->checkAccess(g, ResourceKind::kModel, "llama3", "llama-3-8b"), std::nullopt);
  const auto no = worker_->checkAccess(g, ResourceKind::kModel, "gpt-4o", "gpt-4o");
  ASSERT_TRUE(no);
  EXPECT_EQ(no->status, 403);
  EXPECT_EQ(no->code, "model_not_allowed");
}

TEST_F(AccessApiTest, RequestLimitRefusesUntilTheSteppedClockLeavesTheMinute) {
  for (int i = 0; i < 2; ++i) {
    Grant g;
    ASSERT_EQ(worker_->authenticate(token_, "", g), std::nullopt);
    ASSERT_EQ(admit(g, 1, 1), std::nullopt) << i;
    EXPECT_TRUE(g.reserved());
    EXPECT_EQ(header("x-ratelimit-remaining-requests"), std::to_string(1 - i));
    finish(g, 1, 1);
  }
  Grant third;
  ASSERT_EQ(worker_->authenticate(token_, "", third), std::nullopt);
  const auto refused = admit(third, 1, 1);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429);
  EXPECT_EQ(refused->code, "rate_limit_exceeded");
  EXPECT_FALSE(third.reserved());
  EXPECT_FALSE(header("retry-after").empty());
  finish(third, 0, 0);

  clock_.advance(std::chrono::seconds(59));
  Grant still;
  ASSERT_EQ(worker_->authenticate(token_, "", still), std::nullopt);
  EXPECT_TRUE(admit(still, 1, 1));  // the window still holds both requests
  finish(still, 0, 0);
  clock_.advance(std::chrono::seconds(2));
  Grant later;
  ASSERT_EQ(worker_->authenticate(token_, "", later), std::nullopt);
  EXPECT_EQ(admit(later, 1, 1), std::nullopt);  // 61 s on: the first two left the window
  finish(later, 1, 1);
}

TEST_F(AccessApiTest, FinishSettlesTheReservationToWhatWasUsed) {
  // 100 tokens a minute: a request reserves its worst case (10 + 80), and finishing it with what
  // it used (10 + 5) gives back the rest, so the next worst case fits where it would not have.
  Grant a;
  ASSERT_EQ(worker_->authenticate(token_, "", a), std::nullopt);
  ASSERT_EQ(admit(a, 10, 80), std::nullopt);
  Grant b;
  ASSERT_EQ(worker_->authenticate(token_, "", b), std::nullopt);
  const auto full = admit(b, 10, 80);
  ASSERT_TRUE(full);  // 90 + 90 > 100 while a holds its reservation
  EXPECT_EQ(full->type, "tokens");
  finish(b, 0, 0);
  finish(a, 10, 5);
  Grant c;
  ASSERT_EQ(worker_->authenticate(token_, "", c), std::nullopt);
  EXPECT_EQ(admit(c, 10, 75), std::nullopt);  // 15 used + 85 reserved = 100
  EXPECT_EQ(header("x-ratelimit-remaining-tokens"), "0");
  finish(c, 10, 75);
}

TEST_F(AccessApiTest, AResourcesOwnLimitIsReservedAndGivenBackOnAnotherResource) {
  LimitedResource dep1, dep2;
  dep1.limits = {1, 0};
  dep1.req = "d:llama/a:r";
  dep2.limits = {1, 0};
  dep2.req = "d:llama/b:r";
  Grant g;
  ASSERT_EQ(worker_->authenticate(token_, "", g), std::nullopt);
  ASSERT_EQ(admit(g, 1, 1), std::nullopt);
  EXPECT_EQ(run(ctx_, worker_->admitResource(g, dep1)), std::nullopt);
  EXPECT_TRUE(g.holdsResource());
  // A retry on dep2 gives dep1 its request back...
  EXPECT_EQ(run(ctx_, worker_->admitResource(g, dep2)), std::nullopt);
  Grant other;
  ASSERT_EQ(worker_->authenticate(token_, "", other), std::nullopt);
  ASSERT_EQ(admit(other, 1, 1), std::nullopt);
  EXPECT_EQ(run(ctx_, worker_->admitResource(other, dep1)), std::nullopt);
  // ... and dep2, held by g, is full for another request.
  const auto full = run(ctx_, worker_->admitResource(other, dep2));
  ASSERT_TRUE(full);
  EXPECT_FALSE(full->tokens);
  EXPECT_GT(full->retry_after_ms, 0);
  finish(g, 1, 1);
  finish(other, 1, 1);
}

}  // namespace
}  // namespace infera::access
