#pragma once
// Private to the gateway: keys, teams, permissions, limits, usage, budgets and the response cache.
//
// Governance (one per process) owns the control thread: it polls the metadata store's change
// generation (every sync_interval_ms, and at once after a local admin change), rebuilds the
// key/team snapshot and hands it to every worker; it writes usage records in batches every
// usage_flush_ms. GovWorker (one per event loop) is what the data plane calls: no lock except the
// shared local counters' shard mutex and the usage buffer hand-off.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gateway/config.h"
#include "gateway/keys.h"
#include "gateway/limiter.h"
#include "gateway/routes.h"
#include "net/asio.h"
#include "net/http.h"
#include "obs/metrics.h"

namespace spdlog {
class logger;
}

namespace infera::gateway {

class Governance;

// What the data plane needs to finish a governed request.
struct GovTicket {
  std::shared_ptr<const GovSnapshot> snapshot;  // keeps key/team alive
  const KeyInfo* key = nullptr;                 // null: anonymous (require_keys: false)
  std::string team = "anonymous";
  std::string user;
  const UserInfo* user_info = nullptr;  // the user's record, if it has one
  std::string user_req, user_tok;  // counter names of a user without a record (the charges point into them)
  int64_t est_prompt = 0;
  int64_t max_completion = 0;
  int64_t reserved_tokens = 0;
  int64_t reserved_cost = 0;  // micro-USD
  std::vector<Charge> charges;
  Admission admission;
  bool reserved = false;
  std::vector<Charge> dep_charges;  // the deployment's, reserved when it is picked
  Admission dep_admission;
  bool dep_reserved = false;
  // Every deployment was at its own limit: the gateway refused the request, so it gives the key's
  // and team's counters their request back too (the tokens come back with the reconciliation).
  bool refused_by_deployments = false;
};

struct GovError {
  int status = 0;
  std::string message;
  std::string type;
  std::string code;
};

class ResponseCache {
 public:
  ResponseCache(int64_t max_bytes, int64_t max_entry_bytes) : max_bytes_(max_bytes), max_entry_(max_entry_bytes) {}
  struct Entry {
    std::string body;
    std::string content_type;
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t expires_ms = 0;
  };
  std::optional<Entry> get(const std::string& key, int64_t now_ms);
  void put(const std::string& key, Entry e);
  int64_t bytes() const { return bytes_.load(); }
  size_t size();

 private:
  struct Node {
    std::string key;
    Entry entry;
  };
  std::mutex mu_;
  std::list<Node> lru_;  // front = most recent
  std::unordered_map<std::string, std::list<Node>::iterator> index_;
  std::atomic<int64_t> bytes_{0};
  int64_t max_bytes_;
  int64_t max_entry_;
};

// retry-after (whole seconds, rounded up) and retry-after-ms, as OpenAI sends them on a 429.
void appendRetryAfter(std::vector<net::HttpHeader>& out, int64_t retry_after_ms);

// Cache key over the model and the body with object keys sorted and whitespace removed, and the
// team (empty for a cache shared by all teams); empty when the body cannot be normalised.
std::string cacheKey(std::string_view model, std::string_view body, std::string_view team = {});

class GovWorker {
 public:
  GovWorker(Governance& g, int shard, net::asio::io_context& ctx);
  ~GovWorker();
  // Ignores a snapshot older than the one held (posts from two threads may arrive out of order).
  void setSnapshot(std::shared_ptr<const GovSnapshot> s) {
    if (snapshot_ && s && s->generation < snapshot_->generation) return;
    snapshot_ = std::move(s);
    token_cache_.clear();
  }

  // Who is calling: fills ticket.key/team/user, or an error (401).
  std::optional<GovError> authenticate(std::string_view authorization, std::string_view user_header, GovTicket& t);
  // Whether the key and its team may use the model (by requested or canonical name).
  bool allowed(const GovTicket& t, std::string_view requested, std::string_view canonical) const;
  // Admission in three steps so the in-process path needs no coroutine: build the charges (key,
  // team, quotas, budget, model), reserve them (reserveLocal, or co_await reserveRemote when
  // remote()), then settle (the refusal to send, if any).
  void buildCharges(GovTicket& t, const Route& route, const PriceConfig& price, bool count_model);
  bool remote() const { return redis_ != nullptr; }
  Admission reserveLocal(std::span<const Charge> charges);
  net::Task<Admission> reserveRemote(std::span<const Charge> charges);
  std::optional<GovError> settle(GovTicket& t);
  // The same for a deployment's own limits (false from build: it has none; from settle: full).
  bool buildDeploymentCharges(GovTicket& t, const Deployment& dep);
  bool settleDeployment(GovTicket& t);
  // Reconciles reservations with the actual tokens and writes the usage record.
  void finish(GovTicket& t, UsageRecord&& record, const PriceConfig& price);
  // x-ratelimit-* headers for the ticket's admission.
  void rateLimitHeaders(const GovTicket& t, std::vector<net::HttpHeader>& out) const;

  ResponseCache* cache();
  // Whether a team's requests hit only its own cache entries (cache.scope: team).
  bool cachePerTeam() const { return cache_per_team_; }
  void countCache(bool hit);
  // The process cache, then (with cache.redis) the shared tier in Redis; a Redis hit is kept locally.
  net::Task<std::optional<ResponseCache::Entry>> cacheGet(const std::string& key);
  void cachePut(const std::string& key, ResponseCache::Entry e);
  const GovernanceConfig& config() const;

 private:
  void adjust(std::span<const Charge> charges, std::span<const int64_t> delta, const Admission& a);
  void flushAdjustments();
  // Sends the pending adjustments within kAdjustBatchMs (at once beyond kAdjustBatchMax of them).
  void scheduleFlush();
  // Ends the leases that expired (what they had left goes back to Redis), drops idle counters and
  // arms lease_timer_ for the next lease to end.
  void tendLeases();
  // Sets lease_timer_ to fire at `next` (local ms) unless it fires sooner already.
  void armLeaseTimer(int64_t next, int64_t now);
  struct PendingAdmission {
    std::span<const Charge> charges;
    Admission result;
    bool done = false;
    net::asio::steady_timer timer;  // cancelled when `result` is ready
  };
  net::Task<void> runBatch(std::vector<PendingAdmission*> batch);
  // Wakes the waiters; those without a decision get the local fallback.
  void answer(std::span<PendingAdmission* const> waiters, int64_t now);
  Admission fallback(std::span<const Charge> charges, int64_t now);
  // Cancel and reconciliation calls not answered yet (both scripts apply a call id once, so they
  // are safe to send again): what the worker's destructor sends before its loop stops.
  struct Unanswered {
    struct Call {
      const store::RedisScript* script;
      std::vector<std::string> keys;
      std::vector<std::string> args;
    };
    uint64_t next = 0;
    std::unordered_map<uint64_t, std::shared_ptr<const Call>> calls;
    // Lists a call; the task that sends it holds the same one.
    std::pair<uint64_t, std::shared_ptr<const Call>> add(const store::RedisScript& script,
                                                         std::vector<std::string> keys,
                                                         std::vector<std::string> args) {
      auto call = std::make_shared<const Call>(Call{&script, std::move(keys), std::move(args)});
      calls.emplace(++next, call);
      return {next, std::move(call)};
    }
  };
  // Takes a call off the list (put there by its spawner) when its task ends, answered or not.
  struct Unlist {
    std::shared_ptr<Unanswered> u;
    uint64_t id;
    ~Unlist() { u->calls.erase(id); }
  };
  // Spawned: owns what it uses (it may finish after this worker is gone).
  // Undoes an admission call whose answer never came (it may have run): retried every 500 ms for up
  // to 100 s, within the two minutes the call's marker lives.
  static net::Task<void> cancelRemote(net::asio::io_context& ctx, std::shared_ptr<store::AsyncRedis> redis,
                                      obs::Counter* cancelled, obs::Counter* errors, int shard,
                                      std::shared_ptr<int> running, std::shared_ptr<Unanswered> unanswered,
                                      uint64_t listed, std::shared_ptr<const Unanswered::Call> call);
  // Reconciles in Redis. The call carries an id its script records, so it applies once however
  // often it is sent: one Redis did not answer is re-sent every 500 ms for up to 100 s (at most
  // kMaxRetrying such calls per worker at a time).
  static net::Task<void> adjustRemote(net::asio::io_context& ctx, std::shared_ptr<store::AsyncRedis> redis,
                                      obs::Counter* retried, obs::Counter* errors, int shard,
                                      std::shared_ptr<int> retrying, std::shared_ptr<Unanswered> unanswered,
                                      uint64_t listed, std::shared_ptr<const Unanswered::Call> call);
  // Sends a script call until Redis answers it (a reply, even an error reply), every 500 ms until
  // `give_up`; the last transport error otherwise. Only for calls that are safe to repeat.
  static net::Task<Result<store::RedisReply>> callUntilAnswered(net::asio::io_context& ctx,
                                                                 std::shared_ptr<store::AsyncRedis> redis,
                                                                 const store::RedisScript& script,
                                                                 const std::vector<std::string>& keys,
                                                                 const std::vector<std::string>& args,
                                                                 std::chrono::steady_clock::time_point give_up);
  static constexpr int kAdjustBatchMs = 10;
  static constexpr int kMaxCallsInFlight = 1;  // admission script calls out per worker
  static constexpr size_t kAdjustBatchMax = 256;
  GovError refusal(const GovTicket& t, std::span<const Charge> charges, const Admission& a) const;

  Governance& g_;
  int shard_;
  net::asio::io_context& ctx_;
  std::shared_ptr<const GovSnapshot> snapshot_;
  // Keys verified under this snapshot, by key id, with the secret that verified (a token's secret
  // is compared with it in constant time: the cache is no shortcut around that).
  struct VerifiedKey {
    const KeyInfo* key;
    std::string secret;
  };
  std::unordered_map<std::string, VerifiedKey, TransparentStringHash, std::equal_to<>> token_cache_;
  std::shared_ptr<store::AsyncRedis> redis_;
  bool cache_per_team_;
  std::vector<PendingAdmission*> batch_;  // admissions waiting for the next script call
  bool batch_posted_ = false;
  int calls_in_flight_ = 0;
  std::string call_prefix_;  // unique per worker and process: admission call ids
  uint64_t call_seq_ = 0;
  static constexpr int kMaxCancels = 64;
  std::shared_ptr<int> cancels_ = std::make_shared<int>(0);  // undo tasks running
  static constexpr int kMaxRetrying = 64;
  std::shared_ptr<int> adjust_retrying_ = std::make_shared<int>(0);  // reconciliations being re-sent
  uint64_t adjust_seq_ = 0;
  std::shared_ptr<Unanswered> unanswered_ = std::make_shared<Unanswered>();
  void dispatchBatch();
  PendingAdjustments pending_;  // adjustments not yet sent
  net::asio::steady_timer flush_timer_;
  bool flush_scheduled_ = false;
  RedisLeases leases_;
  net::asio::steady_timer lease_timer_;
  int64_t lease_timer_at_ = std::numeric_limits<int64_t>::max();  // local ms it is armed for
  int64_t leases_tended_ms_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  struct UsageCounters {
    obs::Counter* prompt;
    obs::Counter* completion;
    obs::Counter* requests;
  };
  using ByModel = std::unordered_map<std::string, UsageCounters, TransparentStringHash, std::equal_to<>>;
  std::unordered_map<std::string, ByModel, TransparentStringHash, std::equal_to<>> usage_counters_;
};

struct AdminReply {
  int status = 200;
  std::string body;  // JSON
};

class Governance {
 public:
  static Result<std::unique_ptr<Governance>> start(const GovernanceConfig& config, obs::MetricsRegistry& metrics,
                                                   int workers);
  ~Governance();

  const GovernanceConfig& config() const { return config_; }
  // Called (on the control thread) with every new snapshot; the gateway posts it to each worker.
  void setPublisher(std::function<void(std::shared_ptr<const GovSnapshot>)> fn);
  std::shared_ptr<const GovSnapshot> snapshot() const;

  // The admin API under /admin/{teams,keys,usage,audit} (admin port). Blocking: call it from the
  // admin loop. `authorization` is the request's Authorization header.
  static bool isGovernancePath(std::string_view path);
  AdminReply admin(std::string_view method, std::string_view target, std::string_view body,
                   std::string_view authorization, std::string_view actor);
  // The admin token check every admin path but /metrics, /healthz and /readyz passes: an error
  // reply (401, or 403 when no token is set), or nothing when `authorization` carries the token.
  std::optional<AdminReply> refuseAdmin(std::string_view authorization) const;
  // An audit row for an admin action outside the governance store (e.g. "config.reload");
  // `detail` is a JSON object. Blocking, like admin().
  Status auditEvent(std::string_view actor, const std::string& action, const std::string& target,
                    const std::string& detail);

  // Usage records from the workers (buffered, written by the control thread).
  void recordUsage(int shard, UsageRecord&& r);
  // Writes buffered records now (tests; shutdown).
  Status flushUsage();
  // Deletes usage records and roll-ups past their retention, all of them (tests, tools); the
  // control thread does it a step (an hour of records) at a time, hourly. Returns the rows removed.
  Result<int64_t> pruneUsage();
  Result<int64_t> pruneUsageStep();

  const std::string& keySecret() const { return key_secret_; }
  LocalCounters& localCounters() { return local_; }

  obs::Family* usage_tokens = nullptr;    // {team, model, kind}
  obs::Family* usage_requests = nullptr;  // {team, model}
  obs::Counter* denied_auth = nullptr;
  obs::Family* limited = nullptr;         // {scope}
  obs::Counter* redis_fallbacks = nullptr;
  obs::Counter* redis_errors = nullptr;
  obs::Counter* redis_cancelled = nullptr;
  obs::Counter* redis_adjust_retries = nullptr;
  obs::Counter* seed_refreshes = nullptr;  // the store's quota figures for Redis, rebuilt
  obs::Histogram* redis_call_seconds = nullptr;    // one admission script call, send to reply
  obs::Histogram* redis_call_admissions = nullptr;  // admissions decided by one call
  obs::Counter* redis_leases = nullptr;            // leases granted (RedisLeases)
  obs::Counter* redis_lease_admissions = nullptr;  // admissions decided from a lease, without a call
  obs::Counter* usage_dropped = nullptr;
  obs::Counter* cache_hits = nullptr;
  obs::Counter* cache_misses = nullptr;
  std::atomic<bool> redis_down{false};
  spdlog::logger* log = nullptr;

 private:
  explicit Governance(const GovernanceConfig& c, int workers) : config_(c), usage_buffers_(static_cast<size_t>(workers)) {}
  Status init(obs::MetricsRegistry& metrics);
  void controlLoop();
  Status sync(bool force);
  void seedQuotas(const GovSnapshot& s);
  // Calls fn for every day/month quota or budget counter of the snapshot's teams and users, with
  // the tokens (or micro-USD) the store says were used since its period began.
  // False if a query failed (fn was not called for that counter).
  bool eachQuotaUse(const GovSnapshot& s, const std::function<void(const Charge&, int64_t used)>& fn);
  // Redis: rebuilds quota_seeds_ from the store (control thread, under store_mu_: after a new
  // snapshot and every minute); keeps the previous figures if a query fails.
  void refreshQuotaSeeds(const GovSnapshot& s);
  AdminReply adminLocked(std::string_view method, std::string_view target, std::string_view body,
                         std::string_view actor);

  GovernanceConfig config_;
  std::string key_secret_;
  std::string admin_token_;
  // Redis: the store's use of each day/month counter by Redis key (period included), for counters
  // Redis does not hold (Charge::seed).
  using QuotaSeeds = std::unordered_map<std::string, int64_t, TransparentStringHash, std::equal_to<>>;
  mutable std::mutex seeds_mu_;
  std::shared_ptr<const QuotaSeeds> quota_seeds_;
  std::atomic<bool> seeds_stale_{true};  // a new snapshot: the control thread refreshes the seeds
  std::unique_ptr<MetaStore> control_store_;  // under store_mu_ (control thread; admin after a change)
  std::mutex store_mu_;
  std::unique_ptr<MetaStore> admin_store_;    // admin loop only (under admin_mu_)
  std::mutex admin_mu_;
  mutable std::mutex snap_mu_;
  std::mutex publish_mu_;
  std::shared_ptr<const GovSnapshot> snapshot_;
  std::function<void(std::shared_ptr<const GovSnapshot>)> publish_;
  LocalCounters local_;
  std::unique_ptr<ResponseCache> cache_;
  struct UsageBuffer {
    std::mutex mu;
    std::vector<UsageRecord> records;
  };
  std::vector<UsageBuffer> usage_buffers_;
  std::mutex flush_mu_;
  std::thread control_;
  std::mutex control_mu_;
  std::condition_variable control_cv_;
  bool stop_ = false;
  bool poke_ = false;
  int64_t generation_ = -1;
  friend class GovWorker;
};

}  // namespace infera::gateway
