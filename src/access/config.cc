#include "access/config.h"

#include "core/config.h"
#include "core/text.h"
#include "store/redis.h"

namespace infera::access {

void readLimits(ConfigReader& r, LimitConfig& l) {
  r.optional("rpm", l.rpm, 0, 1LL << 40);
  r.optional("tpm", l.tpm, 0, 1LL << 50);
}

void readPrice(ConfigReader& p, PriceConfig& out) {
  p.optional("prompt_per_1m", out.prompt_per_1m, 0, 1e9);
  p.optional("completion_per_1m", out.completion_per_1m, 0, 1e9);
}

void readAccessConfig(ConfigReader& g, AccessConfig& gc) {
  gc.enabled = true;
  g.optional("enabled", gc.enabled);
  g.optional("require_keys", gc.require_keys);
  g.optional("store", gc.store);
  if (!(gc.store.rfind("sqlite:", 0) == 0 || gc.store.rfind("postgresql://", 0) == 0 ||
        gc.store.rfind("postgres://", 0) == 0)) {
    g.error("store",
            "must be sqlite:PATH or a postgresql:// URL (got '" + redactUrl(gc.store) + "')");
  }
  g.optional("admin_token", gc.admin_token);
  g.optional("admin_token_file", gc.admin_token_file);
  if (!gc.admin_token.empty() && !gc.admin_token_file.empty()) {
    g.error("admin_token_file", "set admin_token or admin_token_file, not both");
  }
  g.optional("key_secret", gc.key_secret);
  // At most 4 s: changes reach every replica within 5 s (the poll plus the snapshot's rebuild).
  g.optional("sync_interval_ms", gc.sync_interval_ms, 10, 4'000);
  g.optional("usage_flush_ms", gc.usage_flush_ms, 10, 60'000);
  g.optional("usage_retention_days", gc.usage_retention_days, 0, 36'500);
  g.optional("usage_rollup_retention_days", gc.usage_rollup_retention_days, 0, 36'500);
  g.optional("default_max_tokens", gc.default_max_tokens, 1, 10'000'000);
  g.optional("redis", gc.redis);
  if (!gc.redis.empty()) {
    if (auto a = store::parseRedisUrl(gc.redis); !a.ok()) g.error("redis", a.status().message());
  }
  g.optional("redis_timeout_ms", gc.redis_timeout_ms, 1, 10'000);
  g.optionalEnum("redis_fallback", gc.redis_fallback, {"local", "open", "closed"});
  g.optional("replicas", gc.replicas, 1, 10'000);
  g.optional("redis_lease_ms", gc.redis_lease_ms, 0, 1'000);
  g.optional("user_header", gc.user_header);
  g.object("cache", [&](ConfigReader& c) {
    gc.cache.enabled = true;
    c.optional("enabled", gc.cache.enabled);
    c.optional("ttl_ms", gc.cache.ttl_ms, 1, 30LL * 86'400'000);
    c.optional("max_bytes", gc.cache.max_bytes, 1024, 1LL << 40);
    c.optional("max_entry_bytes", gc.cache.max_entry_bytes, 16, 1LL << 30);
    c.optional("redis", gc.cache.redis);
    c.optionalEnum("scope", gc.cache.scope, {"team", "global"});
  });
  if (gc.cache.redis && gc.redis.empty()) g.error("cache", "redis: true needs governance.redis");
}

}  // namespace infera::access
