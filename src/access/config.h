#pragma once
// Access control's config: the `governance` section (keys, teams, limits, usage, budgets, cache),
// and the limits and prices other components' sections carry (a model's, a deployment's).

#include <cstdint>
#include <string>

namespace infera {
class ConfigReader;
}

namespace infera::access {

// Request and token limits per rolling minute; 0 = none.
struct LimitConfig {
  int64_t rpm = 0;
  int64_t tpm = 0;
};

// USD per million tokens, for cost budgets and usage records.
struct PriceConfig {
  double prompt_per_1m = 0;
  double completion_per_1m = 0;
};

struct CacheConfig {
  bool enabled = false;
  int64_t ttl_ms = 300'000;
  int64_t max_bytes = 64 << 20;  // per process, LRU beyond it
  int64_t max_entry_bytes = 1 << 20;
  bool redis = false;  // also share entries through governance.redis
  // "team": a team's requests hit only its own entries (a hit would tell another team what was
  // asked); "global": one entry serves every team.
  std::string scope = "team";
};

// Keys, teams, limits, usage, budgets, cache. Off unless the `governance` section is present.
struct AccessConfig {
  bool enabled = false;
  bool require_keys = true;                // false: requests without a key pass as team "anonymous"
  std::string store = "sqlite:infera.db";  // sqlite:PATH or postgresql://...
  std::string admin_token;                 // bearer token for /admin/*; env INFERA_ADMIN_TOKEN wins
  // A file holding the admin token (its first line), created with a random one (mode 0600) when
  // absent: a mounted secret, or `infera serve`'s data directory. admin_token and the env win.
  std::string admin_token_file;
  std::string key_secret;  // server secret keying the key hashes; env INFERA_KEY_SECRET wins
  int64_t sync_interval_ms = 500;    // how often the key/team snapshot is checked for changes
  int64_t usage_flush_ms = 1'000;    // usage records reach the store at least this often
  int64_t usage_retention_days = 0;  // raw usage records older than this are deleted; 0 = keep
  int64_t usage_rollup_retention_days = 0;  // per-minute roll-ups (what queries read); 0 = keep
  int64_t default_max_tokens = 1'024;       // completion tokens reserved when a request sets none
  std::string redis;  // redis://host:port shared counters; "" = this process only
  int64_t redis_timeout_ms = 50;
  std::string redis_fallback = "local";  // local (a 1/replicas share) | open | closed
  int replicas = 1;                      // replicas sharing the limits (for the local share)
  // Leases (RedisLeases): each worker reserves ~this much of its traffic ahead in Redis; 0 = one
  // Redis decision per admission.
  int64_t redis_lease_ms = 100;
  std::string user_header = "x-infera-user";
  CacheConfig cache;
};

// The `governance` section's keys (reader at the section; sets enabled). Errors go to the reader.
void readAccessConfig(ConfigReader& section, AccessConfig& out);
// `limits: {rpm, tpm}` and `price: {prompt_per_1m, completion_per_1m}` of a model or deployment
// (reader at the mapping).
void readLimits(ConfigReader& r, LimitConfig& out);
void readPrice(ConfigReader& r, PriceConfig& out);

}  // namespace infera::access
