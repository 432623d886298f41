#pragma once
// Access control for every HTTP service of the process: who is calling (API keys of teams, users
// inside a team), what they may use (models today; feature services and collections next), what
// they may spend (rate limits, daily quotas, budgets, exact across replicas through Redis), what
// they used (usage records), and the admin API that manages it (teams, users, keys, usage, audit).
//
//   auto access = access::Access::start(config, metrics, workers);        // once per process
//   auto w = (*access)->worker(loop_index, ctx);                           // once per loop
//   access::Grant grant;
//   if (auto denied = w->authenticate(req.header("authorization"), req.header(w->userHeader()),
//   grant)) {
//     answer(*denied);                                                     // 401
//   } else if (auto no = w->checkAccess(grant, ResourceKind::kModel, "llama3", "llama-3-8b")) {
//     answer(*no);                                                         // 403
//   } else if (auto full = co_await w->admit(grant, {...}, headers)) {
//     answer(*full);                                                       // 429
//   }
//   ... serve ...
//   w->finish(grant, std::move(usage_record), price);                      // reconcile, record
//
// Threads: Access is thread-safe. An AccessWorker lives on one event loop and is used only from
// it (no lock on its request path but the in-process counters' shard mutexes); destroy it on its
// loop. Whether limits live in this process or in Redis is the worker's business: callers see
// one admit().

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "access/config.h"
#include "access/limits.h"
#include "core/clock.h"
#include "core/status.h"
#include "net/asio.h"
#include "net/http.h"

namespace infera::obs {
class MetricsRegistry;
}
namespace infera::net {
class Router;
}

namespace infera::access {

struct GovTicket;  // internal: one request's identity and reservations

// Why a request is refused, in the OpenAI error shape's terms (status, message, type, code).
struct Denial {
  int status = 0;
  std::string message;
  std::string type;
  std::string code;
};

// The caller once authenticated: views into its Grant.
struct Principal {
  std::string_view key_id;  // empty when anonymous (require_keys: false)
  std::string_view team;    // "anonymous" without a key
  std::string_view user;    // named by the user header, if the key allows it
};

// A valid team API key presented on the admin port (read-only: its team's keys, users, usage).
struct TeamCaller {
  std::string team;
  std::string key_id;
  std::string key_name;
};

// One request's identity and reservations. Empty (false) until authenticate() fills it; move-only.
class Grant {
 public:
  Grant();
  ~Grant();
  Grant(Grant&&) noexcept;
  Grant& operator=(Grant&&) noexcept;

  explicit operator bool() const { return t_ != nullptr; }
  // Forgets the caller (a request that is not usage, e.g. listing models).
  void reset();
  Principal principal() const;
  // Whether admit() reserved the request's charges, and the estimates it reserved.
  bool reserved() const;
  int64_t estimatedPrompt() const;
  int64_t maxCompletion() const;
  // Whether admitResource() holds a reservation (a retry on another resource gives it back).
  bool holdsResource() const;
  // Every resource the request could use was at its own limit: nothing served it, so the key's,
  // team's and user's counters get their request back too when it finishes.
  void refusedByResources();

  GovTicket* ticket() const { return t_.get(); }

 private:
  std::unique_ptr<GovTicket> t_;
  friend class GovWorker;
};

// What a request uses, for checkAccess: models (the gateway), collections (the vector index),
// feature services (the feature store), registered models (the registry).
enum class ResourceKind { kModel, kCollection, kFeatureService, kRegisteredModel };

// Ownership of the resources a team creates through the data port (vector collections, feature
// views and services): each is stored with its owning team. What a caller may do with one:
//   - its own team's: everything;
//   - shared (owner empty: made on the admin port or with access control off, or from before
//     ownership was recorded): read and write its data, never drop it or change its schema
//     (kManage: the admin port's);
//   - another team's: nothing, answered as if it did not exist (404: a name tells nothing).
// Without access control (an empty grant) every caller is the operator: everything. A caller
// without a key (require_keys: false) owns nothing: what it creates is shared, and another team's
// resources are absent to it.
enum class Operation { kRead, kWrite, kManage };
std::optional<Denial> checkOwner(const Grant& grant, ResourceKind kind, std::string_view name,
                                 std::string_view owner, Operation op);
// The owner to record for a resource the caller creates: its team, or empty (shared) without
// access control.
std::string owningTeam(const Grant& grant);
// What a caller may list: its own team's resources and the shared ones.
bool visibleTo(const Grant& grant, std::string_view owner);

// What admit() reserves for a request, besides the caller's own counters.
struct AdmitRequest {
  const LimitedResource* resource = nullptr;  // the model's own limits (all callers together)
  bool count_resource = true;                 // false: spare the resource's limits (a cache hit)
  PriceConfig price;                          // for cost budgets
  int64_t est_prompt_tokens = 0;
  int64_t max_completion_tokens = 0;
};

// A resource admitResource() found full: which of its limits, and when it has room again.
struct ResourceFull {
  bool tokens = false;  // the token limit (else the request limit)
  int64_t retry_after_ms = 0;
};

// What one request used, written to the usage store (the key, team and user come from the grant;
// finish() stamps the time with access control's clock).
struct UsageRecord {
  int64_t ts_ms = 0;
  std::string request_id;
  std::string key_id;
  std::string team;
  std::string user;
  std::string model;
  std::string deployment;
  std::string region;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double latency_ms = 0;
  double ttft_ms = 0;
  int status = 0;
  bool cached = false;
  bool stream = false;
  bool aborted = false;
  bool estimated = false;  // no usage came back; the reservation's estimate was billed
  bool batch = false;      // a line of a batch (the Batch API), billed at its price factor
  double cost_usd = 0;
};

// A cached answer with the usage it was billed at.
struct CachedAnswer {
  std::string body;
  std::string content_type;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t expires_ms = 0;  // unix ms; set by cachePut from cache.ttl_ms
};

class AccessWorker {
 public:
  virtual ~AccessWorker() = default;

  // The header that names a user inside a team (governance.user_header).
  virtual std::string_view userHeader() const = 0;
  // Completion tokens to reserve for a request that sets no max_tokens
  // (governance.default_max_tokens).
  virtual int64_t defaultMaxTokens() const = 0;
  // Who is calling, from the request's Authorization header ("Bearer sk-inf-...") and user header.
  // Fills `grant`; else the denial to answer (401; 403 when the key may not name a user).
  virtual std::optional<Denial> authenticate(std::string_view authorization, std::string_view user,
                                             Grant& grant) = 0;
  // An in-process caller acting as the key `key_id` (net::InProcessCaller: the batch executor runs
  // a batch's lines as the key that created it). The key must still be valid now (known, not
  // revoked, not expired), and may name `user` only if it may set the user header. Fills `grant`;
  // else the denial (401/403).
  virtual std::optional<Denial> authenticateKey(std::string_view key_id, std::string_view user,
                                                Grant& grant) = 0;
  // Who is calling `req`, the one way every service reads it: its in-process caller when it has
  // one (authenticateKey; no key id: as a request without a key), else its Authorization header
  // (or, when that is absent, `key_header`'s value as a bearer token: Qdrant's `api-key`) and the
  // user header.
  std::optional<Denial> authenticateRequest(const net::HttpRequest& req, Grant& grant,
                                            std::string_view key_header = {});
  // Whether the caller's key, team and user may use a resource, named as the client named it or
  // by its canonical name: nothing, or the denial (403).
  virtual std::optional<Denial> checkAccess(const Grant& grant, ResourceKind kind,
                                            std::string_view requested,
                                            std::string_view canonical) const = 0;
  // Reserves the request's worst case on every counter that applies (key, team, user, their daily
  // quotas and budgets, and the resource's own limits), all or nothing, and appends the
  // x-ratelimit-* headers to `headers`. Nothing, or the denial (429; 503 when Redis is down and
  // governance.redis_fallback is closed).
  virtual net::Task<std::optional<Denial>> admit(Grant& grant, const AdmitRequest& request,
                                                 std::vector<net::HttpHeader>& headers) = 0;
  // Reserves one request and its tokens on a further resource's own limits (the deployment a
  // request is sent to), giving back what the grant held on a previous one. Nothing, or what was
  // full.
  virtual net::Task<std::optional<ResourceFull>> admitResource(Grant& grant,
                                                               const LimitedResource& resource) = 0;
  // The request is over: reservations reconciled to `record`'s tokens, and the record written.
  virtual void finish(Grant& grant, UsageRecord&& record, const PriceConfig& price) = 0;

  // The response cache (governance.cache). Keys are per team unless cache.scope is global.
  virtual bool cacheEnabled() const = 0;
  // The key of a request for `model` whose canonical form (the caller's one reading of the body:
  // keys sorted, strings and numbers written one way) is `canonical_request`, per team unless
  // cache.scope is global.
  virtual std::string cacheKey(std::string_view model, std::string_view canonical_request,
                               const Grant& grant) const = 0;
  virtual net::Task<std::optional<CachedAnswer>> cacheGet(const std::string& key) = 0;
  // Stores `answer` for cache.ttl_ms from now.
  virtual void cachePut(const std::string& key, CachedAnswer answer) = 0;
  virtual void countCache(bool hit) = 0;
};

class Access {
 public:
  // Opens the store (SQLite file or PostgreSQL), loads keys and teams, starts the control thread
  // (snapshot sync, usage writes, pruning). kInvalidArgument/kUnavailable on a bad store or secret.
  static Result<std::unique_ptr<Access>> start(const AccessConfig& config,
                                               obs::MetricsRegistry& metrics, int workers,
                                               const Clock& clock = SystemClock::instance());
  virtual ~Access() = default;

  // The per-loop side for loop `shard` (0 <= shard < workers). Call on that loop's thread; every
  // new key/team snapshot reaches it there.
  virtual std::unique_ptr<AccessWorker> worker(int shard, net::asio::io_context& ctx) = 0;
  // Registers the admin API (/admin/teams, /admin/users, /admin/keys, /admin/usage, /admin/audit)
  // on the admin port's router. Its handlers block on the store: the admin port has its own loop.
  virtual void addAdminRoutes(net::Router& admin) = 0;
  // The admin token check every admin route but /metrics, /healthz and /readyz passes: nothing,
  // or the denial (401; 403 when no admin token is set, or when `authorization` carries a valid
  // team key: team keys only read, through the team-scoped routes).
  virtual std::optional<Denial> refuseAdmin(std::string_view authorization) const = 0;
  // The team key `authorization` ("Bearer sk-inf-...") carries, when it is valid now (known, not
  // revoked, not expired, its secret verified); else nothing. Does not block.
  virtual std::optional<TeamCaller> teamCaller(std::string_view authorization) const = 0;
  // An audit row for an admin action outside the access store (e.g. "config.reload"); `detail` is
  // a JSON object. Blocking.
  virtual Status audit(std::string_view actor, const std::string& action, const std::string& target,
                       const std::string& detail) = 0;
  // Writes buffered usage records now (shutdown, tests).
  virtual Status flushUsage() = 0;

  // Settings that take effect only at a restart, changed between `running` and `next` (a reload
  // with such a change is refused): enabled, store and redis.
  static std::vector<std::string> restartNeeded(const AccessConfig& running,
                                                const AccessConfig& next);
};

// Without access control: /admin/{teams,users,keys,usage,audit} answer 404 governance_disabled.
void addDisabledAdminRoutes(net::Router& admin);

// retry-after (whole seconds, rounded up) and retry-after-ms, as OpenAI sends them on a 429.
void appendRetryAfter(std::vector<net::HttpHeader>& out, int64_t retry_after_ms);

// An admin-port JSON answer for a denial: {"error":{"message","type","code"}}.
std::string denialJson(const Denial& d);

}  // namespace infera::access
