#pragma once
// Access internals: the implementations of Access (Governance) and AccessWorker (GovWorker).
//
// Governance (one per process) owns the control thread: it polls the metadata store's change
// generation (every sync_interval_ms, and at once after a local admin change), rebuilds the
// key/team snapshot and hands it to every worker; it writes usage records in batches every
// usage_flush_ms. GovWorker (one per event loop) is what the data plane calls: no lock except the
// shared local counters' shard mutex and the usage buffer hand-off.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "access/access.h"
#include "access/config.h"
#include "access/internal/cache.h"
#include "access/internal/keys.h"
#include "access/internal/limiter.h"
#include "net/asio.h"
#include "net/http.h"
#include "net/router.h"
#include "obs/metrics.h"

namespace spdlog {
class logger;
}

namespace infera::access {

class Governance;

// What access control knows of one request (behind Grant).
struct GovTicket {
  std::shared_ptr<const GovSnapshot> snapshot;  // keeps key/team alive
  const KeyInfo* key = nullptr;                 // null: anonymous (require_keys: false)
  std::string team = "anonymous";
  std::string user;
  const UserInfo* user_info = nullptr;  // the user's record, if it has one
  std::string user_req,
      user_tok;  // counter names of a user without a record (the charges point into them)
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
  // Every resource was at its own limit: nothing served the request, so the key's and team's
  // counters get their request back too (the tokens come back with the reconciliation).
  bool refused_by_deployments = false;
};

class GovWorker final : public AccessWorker {
 public:
  GovWorker(Governance& g, int shard, net::asio::io_context& ctx);
  ~GovWorker() override;
  // Ignores a snapshot older than the one held (posts from two threads may arrive out of order).
  void setSnapshot(std::shared_ptr<const GovSnapshot> s);

  // AccessWorker
  std::string_view userHeader() const override;
  int64_t defaultMaxTokens() const override { return config().default_max_tokens; }
  std::optional<Denial> authenticate(std::string_view authorization, std::string_view user,
                                     Grant& grant) override;
  std::optional<Denial> authenticateKey(std::string_view key_id, std::string_view user,
                                        Grant& grant) override;
  std::optional<Denial> checkAccess(const Grant& grant, ResourceKind kind,
                                    std::string_view requested,
                                    std::string_view canonical) const override;
  net::Task<std::optional<Denial>> admit(Grant& grant, const AdmitRequest& request,
                                         std::vector<net::HttpHeader>& headers) override;
  net::Task<std::optional<ResourceFull>> admitResource(Grant& grant,
                                                       const LimitedResource& resource) override;
  void finish(Grant& grant, UsageRecord&& record, const PriceConfig& price) override;
  bool cacheEnabled() const override;
  std::string cacheKey(std::string_view model, std::string_view canonical_request,
                       const Grant& grant) const override;
  net::Task<std::optional<CachedAnswer>> cacheGet(const std::string& key) override;
  void cachePut(const std::string& key, CachedAnswer answer) override;
  void countCache(bool hit) override;

  // The steps of admit (tests drive them one by one): who is calling (ticket.key/team/user, or a
  // 401), whether the key and its team may use the model, the charges (key, team, quotas, budget,
  // resource), their reservation (in process, or in Redis when remote()), and the refusal to send.
  std::optional<Denial> authenticate(std::string_view authorization, std::string_view user_header,
                                     GovTicket& t);
  // The rest of authenticate once the key is known: not expired, the team, the user header.
  std::optional<Denial> acceptKey(const KeyInfo* key, std::string_view user_header, GovTicket& t);
  bool allowed(const GovTicket& t, std::string_view requested, std::string_view canonical) const;
  void buildCharges(GovTicket& t, const LimitedResource* resource, const PriceConfig& price,
                    bool count_resource);
  bool remote() const { return redis_ != nullptr; }
  Admission reserveLocal(std::span<const Charge> charges);
  net::Task<Admission> reserveRemote(std::span<const Charge> charges);
  std::optional<Denial> settle(GovTicket& t);
  // The same for a further resource's own limits (false from build: it has none; from settle:
  // full).
  bool buildResourceCharges(GovTicket& t, const LimitedResource& resource);
  bool settleResource(GovTicket& t);
  // x-ratelimit-* headers for the ticket's admission.
  void rateLimitHeaders(const GovTicket& t, std::vector<net::HttpHeader>& out) const;
  const AccessConfig& config() const;
  std::shared_ptr<bool> alive() const { return alive_; }

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
  // What decide() found: per admission its decision where one was reached (known), and the first
  // failure's reason when some call failed.
  struct Decisions {
    std::vector<Admission> decided;
    std::vector<char> known;
    bool failed = false;
    std::string why;
  };
  // Decides `admissions` (named at local time `now`) in Redis: one reserve script call, or on a
  // Redis Cluster one call per hash tag, sent at once. An admission whose counters span tags
  // is admitted when every part of it is; when one is refused (or its call fails) the parts that
  // were admitted are given back (an adjustment), so Redis never keeps what was not admitted. A
  // call that may have run without an answer is undone (cancelCall).
  net::Task<Decisions> decide(std::vector<std::span<const Charge>> admissions, int64_t now,
                              std::string call_id);
  // Spawns the undo of a reserve call that may have run (the same arguments, for cancelScript).
  void cancelCall(std::span<const std::span<const Charge>> admissions, int64_t now,
                  const std::string& call_id);
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
  static net::Task<void> cancelRemote(net::asio::io_context& ctx,
                                      std::shared_ptr<store::AsyncRedis> redis,
                                      obs::Counter* cancelled, obs::Counter* errors, int shard,
                                      std::shared_ptr<int> running,
                                      std::shared_ptr<Unanswered> unanswered, uint64_t listed,
                                      std::shared_ptr<const Unanswered::Call> call);
  // Reconciles in Redis. The call carries an id its script records, so it applies once however
  // often it is sent: one Redis did not answer is re-sent every 500 ms for up to 100 s (at most
  // kMaxRetrying such calls per worker at a time).
  static net::Task<void> adjustRemote(net::asio::io_context& ctx,
                                      std::shared_ptr<store::AsyncRedis> redis,
                                      obs::Counter* retried, obs::Counter* errors, int shard,
                                      std::shared_ptr<int> retrying,
                                      std::shared_ptr<Unanswered> unanswered, uint64_t listed,
                                      std::shared_ptr<const Unanswered::Call> call);
  // Sends a script call until Redis answers it (a reply, even an error reply), every 500 ms until
  // `give_up`; the last transport error otherwise. Only for calls that are safe to repeat.
  static net::Task<Result<store::RedisReply>> callUntilAnswered(
      net::asio::io_context& ctx, std::shared_ptr<store::AsyncRedis> redis,
      const store::RedisScript& script, const std::vector<std::string>& keys,
      const std::vector<std::string>& args, std::chrono::steady_clock::time_point give_up);
  static constexpr int kAdjustBatchMs = 10;
  static constexpr int kMaxCallsInFlight = 1;  // admission script calls out per worker
  static constexpr size_t kAdjustBatchMax = 256;
  Denial refusal(const GovTicket& t, std::span<const Charge> charges, const Admission& a) const;

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
  bool cluster_ = false;  // redis_ is a Redis Cluster: counters carry hash tags (Charge::tag)
  bool cache_per_team_;
  std::vector<PendingAdmission*> batch_;  // admissions waiting for the next script call
  bool batch_posted_ = false;
  int calls_in_flight_ = 0;
  std::string call_prefix_;  // unique per worker and process: admission call ids
  uint64_t call_seq_ = 0;
  static constexpr int kMaxCancels = 64;
  std::shared_ptr<int> cancels_ = std::make_shared<int>(0);  // undo tasks running
  static constexpr int kMaxRetrying = 64;
  std::shared_ptr<int> adjust_retrying_ =
      std::make_shared<int>(0);  // reconciliations being re-sent
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
  using ByModel =
      std::unordered_map<std::string, UsageCounters, TransparentStringHash, std::equal_to<>>;
  std::unordered_map<std::string, ByModel, TransparentStringHash, std::equal_to<>> usage_counters_;
};

// An admin API answer: status and JSON body.
struct AdminReply {
  int status = 200;
  std::string body;
};

class Governance final : public Access {
 public:
  static Result<std::unique_ptr<Governance>> start(const AccessConfig& config,
                                                   obs::MetricsRegistry& metrics, int workers,
                                                   const Clock& clock = SystemClock::instance());
  ~Governance() override;

  // Access
  std::unique_ptr<AccessWorker> worker(int shard, net::asio::io_context& ctx) override;
  void addAdminRoutes(net::Router& admin) override;
  std::optional<Denial> refuseAdmin(std::string_view authorization) const override;
  std::optional<TeamCaller> teamCaller(std::string_view authorization) const override;
  Status audit(std::string_view actor, const std::string& action, const std::string& target,
               const std::string& detail) override;
  Status flushUsage() override;

  const AccessConfig& config() const { return config_; }
  const Clock& clock() const { return clock_; }
  int64_t nowMs() const { return clock_.unixMillis(); }
  std::shared_ptr<const GovSnapshot> snapshot() const;

  // Usage records from the workers (buffered, written by the control thread).
  void recordUsage(int shard, UsageRecord&& r);
  // Deletes usage records and roll-ups past their retention, all of them (tests, tools); the
  // control thread does it a step (an hour of records) at a time, hourly. Returns the rows removed.
  Result<int64_t> pruneUsage();
  Result<int64_t> pruneUsageStep();

  const std::string& keySecret() const { return key_secret_; }
  LocalCounters& localCounters() { return local_; }

  obs::Family* usage_tokens = nullptr;    // {team, model, kind}
  obs::Family* usage_requests = nullptr;  // {team, model}
  obs::Counter* denied_auth = nullptr;
  obs::Family* limited = nullptr;  // {scope}
  obs::Counter* redis_fallbacks = nullptr;
  obs::Counter* redis_errors = nullptr;
  obs::Counter* redis_cancelled = nullptr;
  obs::Counter* redis_adjust_retries = nullptr;
  obs::Counter* seed_refreshes = nullptr;           // the store's quota figures for Redis, rebuilt
  obs::Histogram* redis_call_seconds = nullptr;     // one admission script call, send to reply
  obs::Histogram* redis_call_admissions = nullptr;  // admissions decided by one call
  obs::Counter* redis_leases = nullptr;             // leases granted (RedisLeases)
  obs::Counter* redis_lease_admissions =
      nullptr;  // admissions decided from a lease, without a call
  obs::Counter* usage_dropped = nullptr;
  obs::Counter* usage_written = nullptr;
  obs::Counter* cache_hits = nullptr;
  obs::Counter* cache_misses = nullptr;
  std::atomic<bool> redis_down{false};
  spdlog::logger* log = nullptr;

 private:
  Governance(const AccessConfig& c, int workers, const Clock& clock)
      : config_(c),
        clock_(clock),
        usage_buffers_(static_cast<size_t>(workers)),
        worker_generations_(static_cast<size_t>(workers)) {}
  Status init(obs::MetricsRegistry& metrics);
  // Hands a new snapshot to every worker, on its loop (under publish_mu_).
  void publishLocked(const std::shared_ptr<const GovSnapshot>& snap);
  // The admin API's handlers (admin.cc): a reply for a request, the store lock held; a change
  // reaches this replica's workers before the answer leaves.
  using AdminFn = std::function<AdminReply(net::HttpRequest&, const net::PathParams&, MetaStore&,
                                           const std::string& actor)>;
  void addAdminRoute(net::Router& router, std::string_view method, std::string_view pattern,
                     AdminFn fn);
  // A GET route a team key may call too: fn's last argument is then the key's team (the answer
  // must stay inside it), or "" for the admin token.
  void addTeamReadRoute(net::Router& router, std::string_view pattern, AdminFn fn);
  void controlLoop();
  Status sync(bool force);
  void seedQuotas(const GovSnapshot& s);
  // Calls fn for every day/month quota or budget counter of the snapshot's teams and users, with
  // the tokens (or micro-USD) the store says were used since its period began.
  // False if a query failed (fn was not called for that counter).
  bool eachQuotaUse(const GovSnapshot& s,
                    const std::function<void(const Charge&, int64_t used)>& fn);
  // Redis: rebuilds quota_seeds_ from the store (control thread, under store_mu_: after a new
  // snapshot and every minute); keeps the previous figures if a query fails.
  void refreshQuotaSeeds(const GovSnapshot& s);

  AccessConfig config_;
  const Clock& clock_;
  std::string key_secret_;
  std::string admin_token_;
  // Redis: the store's use of each day/month counter by Redis key (period included), for counters
  // Redis does not hold (Charge::seed).
  using QuotaSeeds =
      std::unordered_map<std::string, int64_t, TransparentStringHash, std::equal_to<>>;
  mutable std::mutex seeds_mu_;
  std::shared_ptr<const QuotaSeeds> quota_seeds_;
  std::atomic<bool> seeds_stale_{true};  // a new snapshot: the control thread refreshes the seeds
  std::unique_ptr<MetaStore>
      control_store_;  // under store_mu_ (control thread; admin after a change)
  std::mutex store_mu_;
  std::unique_ptr<MetaStore> admin_store_;  // admin loop only (under admin_mu_)
  std::mutex admin_mu_;
  mutable std::mutex snap_mu_;
  std::mutex publish_mu_;
  std::shared_ptr<const GovSnapshot> snapshot_;
  // The workers a new snapshot goes to (under publish_mu_; a worker adds itself at construction
  // and leaves at destruction, on its loop).
  struct Subscriber {
    net::asio::io_context* ctx;
    GovWorker* worker;
  };
  std::vector<Subscriber> subscribers_;
  LocalCounters local_;
  std::unique_ptr<ResponseCache> cache_;
  struct UsageBuffer {
    std::mutex mu;
    std::vector<UsageRecord> records;
  };
  std::vector<UsageBuffer> usage_buffers_;
  // The snapshot generation each worker serves (infera_governance_worker_generation{worker}): a
  // test, or an operator, sees every worker reach a change rather than some of them.
  std::vector<std::atomic<int64_t>> worker_generations_;
  std::mutex flush_mu_;
  std::thread control_;
  std::mutex control_mu_;
  std::condition_variable control_cv_;
  bool stop_ = false;
  bool poke_ = false;
  int64_t generation_ = -1;
  friend class GovWorker;
};

}  // namespace infera::access
