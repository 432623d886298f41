// The scale-out online store: one Redis string per (view, entity) holding the row, under
// "<prefix><view id>:<entity key>" on one Redis, or "<prefix><view id>:{<entity key>}" on a
// Redis Cluster (the hash tag puts every view of one entity in one slot), with a key expiry at
// event time + ttl + retain_expired so memory is reclaimed. A request's reads are one MGET on
// one Redis (every view and entity: one round trip); on a cluster one MGET per slot (per
// entity), all sent at once over the per-node pipelines and answered together. A write is one
// EVALSHA of lua/write_newest.lua per slot (newest event wins, per key, atomically).
// Loops use their own pipelined AsyncRedis; the blocking methods share one RedisClient.

#include <map>
#include <mutex>

#include "features/internal/lua_scripts.h"
#include "features/internal/online_store.h"
#include "features/internal/pool.h"
#include "store/redis.h"

namespace infera::features {
namespace {

using store::RedisReply;

// Positions of a request's keys grouped by cluster slot (one group when not a cluster).
std::vector<std::vector<size_t>> bySlot(const std::vector<std::string>& keys, bool cluster) {
  std::vector<std::vector<size_t>> groups;
  if (!cluster) {
    groups.emplace_back(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) groups[0][i] = i;
    return groups;
  }
  std::map<uint16_t, size_t> group_of;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto [it, fresh] = group_of.emplace(store::redisKeySlot(keys[i]), groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  return groups;
}

std::vector<std::string> mgetArgv(const std::vector<std::string>& keys,
                                  const std::vector<size_t>& group) {
  std::vector<std::string> argv;
  argv.reserve(group.size() + 1);
  argv.emplace_back("MGET");
  for (size_t i : group) argv.push_back(keys[i]);
  return argv;
}

// The rows of one MGET reply into their positions.
Status takeRows(const Result<RedisReply>& r, const std::vector<size_t>& group,
                std::vector<std::string>& rows) {
  if (!r.ok()) return r.status().withContext("redis mget");
  if (r->isError()) return Status::unavailable("redis mget: " + r->str);
  if (r->elements.size() != group.size()) return Status::internal("redis mget: unexpected reply");
  for (size_t i = 0; i < group.size(); ++i) {
    if (r->elements[i].type == RedisReply::Type::kString) rows[group[i]] = r->elements[i].str;
  }
  return Status::ok();
}

// Runs every command at once on `redis` (each to its own node) and waits for all the answers.
net::Task<std::vector<Result<RedisReply>>> all(net::asio::io_context& ctx, store::AsyncRedis& redis,
                                               std::vector<std::vector<std::string>> commands) {
  std::vector<net::Task<Result<RedisReply>>> calls;
  calls.reserve(commands.size());
  for (auto& argv : commands) calls.push_back(redis.command(std::move(argv)));
  auto task = store::awaitAll(ctx, std::move(calls));
  auto results = co_await std::move(task);
  co_return results;
}

Status replyError(const Result<RedisReply>& r, std::string_view what) {
  if (!r.ok()) return r.status().withContext("redis " + std::string(what));
  if (r->isError()) return Status::unavailable("redis " + std::string(what) + ": " + r->str);
  return Status::ok();
}

class RedisStore final : public OnlineStore {
 public:
  RedisStore(RedisStoreOptions options, store::RedisAddress address)
      : options_(std::move(options)),
        address_(std::move(address)),
        write_script_(std::string(lua::write_newest())),
        put_script_(std::string(lua::put())) {}

  Status open() {
    INFERA_ASSIGN_OR_RETURN(client_,
                            store::RedisClient::connect(address_, std::chrono::milliseconds(2000)));
    auto r = client_->command({"PING"});
    return replyError(r, "ping");
  }

  std::string keyOf(uint32_t view, std::string_view key) const {
    std::string k = options_.prefix + std::to_string(view) + (cluster() ? ":{" : ":");
    k.append(key);
    if (cluster()) k += '}';
    return k;
  }
  bool cluster() const { return address_.cluster; }

  Status createView(uint32_t, int64_t) override {
    return Status::ok();
  }  // keys carry their own expiry
  std::vector<uint32_t> storedViews() override { return {}; }

  Status dropView(uint32_t view) override {
    std::string pattern;
    for (char c : options_.prefix + std::to_string(view) + ":") {
      if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') pattern += '\\';
      pattern += c;
    }
    pattern += '*';
    std::lock_guard<std::mutex> lock(mu_);
    INFERA_ASSIGN_OR_RETURN(auto masters, client_->masters());
    for (auto& node : masters) {  // every master of a cluster; the server itself otherwise
      std::string cursor = "0";
      do {
        auto r = node->command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
        INFERA_RETURN_IF_ERROR(replyError(r, "scan"));
        if (r->elements.size() != 2) return Status::internal("redis scan: unexpected reply");
        cursor = r->elements[0].str;
        std::vector<std::string> found;
        for (auto& e : r->elements[1].elements) found.push_back(std::move(e.str));
        for (const auto& group : bySlot(found, cluster())) {  // UNLINK's keys share a slot
          if (group.empty()) continue;
          std::vector<std::string> del{"UNLINK"};
          for (size_t i : group) del.push_back(found[i]);
          INFERA_RETURN_IF_ERROR(replyError(node->command(del), "unlink"));
        }
      } while (cursor != "0");
    }
    return Status::ok();
  }

  // The script calls of a write: one per slot (one in all when not a cluster).
  struct ScriptCall {
    std::vector<std::string> keys;
    std::vector<std::string> args;
  };
  std::vector<ScriptCall> scriptCalls(const std::vector<RowWrite>& rows) const {
    std::vector<std::string> keys;
    keys.reserve(rows.size());
    for (const auto& r : rows) keys.push_back(keyOf(r.view, r.key));
    std::vector<ScriptCall> calls;
    for (const auto& group : bySlot(keys, cluster())) {
      ScriptCall& call = calls.emplace_back();
      call.keys.reserve(group.size());
      call.args.reserve(group.size() * 2);
      for (size_t i : group) {
        const RowWrite& r = rows[i];
        call.keys.push_back(std::move(keys[i]));
        call.args.push_back(r.row);
        call.args.push_back(
            std::to_string(r.expire_at_us > 0 ? std::max<int64_t>(r.expire_at_us / 1000, 1) : 0));
      }
    }
    return calls;
  }

  Status write(std::vector<RowWrite> rows) override { return run(write_script_, rows); }
  Status put(std::vector<RowWrite> rows) override { return run(put_script_, rows); }

  std::vector<std::string> keysOf(std::span<const ReadKey> keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(keyOf(k.view, k.key));
    return out;
  }

  Status read(std::span<const ReadKey> keys, std::vector<std::string>& rows) override {
    rows.assign(keys.size(), std::string());
    if (keys.empty()) return Status::ok();
    const std::vector<std::string> names = keysOf(keys);
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& group : bySlot(names, cluster())) {
      INFERA_RETURN_IF_ERROR(takeRows(client_->command(mgetArgv(names, group)), group, rows));
    }
    return Status::ok();
  }

  Result<std::string> loadMeta() override {
    std::lock_guard<std::mutex> lock(mu_);
    auto r = client_->command({"GET", options_.prefix + "registry"});
    INFERA_RETURN_IF_ERROR(replyError(r, "get registry"));
    return r->type == RedisReply::Type::kString ? r->str : std::string();
  }

  Status saveMeta(const std::string& blob) override {
    std::lock_guard<std::mutex> lock(mu_);
    return replyError(client_->command({"SET", options_.prefix + "registry", blob}),
                      "save registry");
  }

  std::unique_ptr<Session> session(net::asio::io_context& ctx, WorkerPool& pool) override;

  Status compact() override { return Status::ok(); }

  StoreStats stats() override {  // summed over a cluster's masters
    StoreStats st;
    std::lock_guard<std::mutex> lock(mu_);
    auto masters = client_->masters();
    if (!masters.ok()) return st;
    for (auto& node : *masters) {
      auto n = node->command({"DBSIZE"});
      if (n.ok() && n->type == RedisReply::Type::kInteger) st.keys += n->integer;
      auto info = node->command({"INFO", "memory"});
      if (info.ok()) {
        const size_t at = info->str.find("used_memory:");
        if (at != std::string::npos) st.bytes += std::stoll(info->str.substr(at + 12));
      }
    }
    return st;
  }

  std::string_view kind() const override { return "redis"; }

  const store::RedisAddress& address() const { return address_; }
  const store::RedisScript& writeScript() const { return write_script_; }
  int64_t timeoutMs() const { return options_.timeout_ms; }

 private:
  Status run(const store::RedisScript& script, const std::vector<RowWrite>& rows) {
    if (rows.empty()) return Status::ok();
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& call : scriptCalls(rows)) {
      INFERA_RETURN_IF_ERROR(replyError(client_->eval(script, call.keys, call.args), "write"));
    }
    return Status::ok();
  }

  RedisStoreOptions options_;
  store::RedisAddress address_;
  store::RedisScript write_script_;
  store::RedisScript put_script_;
  std::mutex mu_;  // client_
  std::unique_ptr<store::RedisClient> client_;
};

class RedisSession final : public Session {
 public:
  RedisSession(RedisStore& store, net::asio::io_context& ctx) : store_(store), ctx_(ctx) {
    store::AsyncRedisOptions o;
    o.command_timeout = std::chrono::milliseconds(store.timeoutMs());
    redis_ = store::AsyncRedis::create(ctx, store.address(), o);
  }
  ~RedisSession() override { redis_->close(); }

  net::Task<Status> read(std::span<const ReadKey> keys, std::vector<std::string>& rows) override {
    rows.assign(keys.size(), std::string());
    if (keys.empty()) co_return Status::ok();
    const std::vector<std::string> names = store_.keysOf(keys);
    const auto groups = bySlot(names, store_.cluster());
    if (groups.size() == 1) {  // one Redis, or every key in one slot: one MGET
      auto task = redis_->command(mgetArgv(names, groups[0]));
      auto r = co_await std::move(task);
      co_return takeRows(r, groups[0], rows);
    }
    std::vector<std::vector<std::string>> commands;
    commands.reserve(groups.size());
    for (const auto& group : groups) commands.push_back(mgetArgv(names, group));
    auto task = all(ctx_, *redis_, std::move(commands));
    const auto replies = co_await std::move(task);
    for (size_t g = 0; g < groups.size(); ++g) {
      Status st = takeRows(replies[g], groups[g], rows);
      if (!st.isOk()) co_return st;
    }
    co_return Status::ok();
  }

  net::Task<Status> write(std::vector<RowWrite> rows) override {
    if (rows.empty()) co_return Status::ok();
    auto calls = store_.scriptCalls(rows);
    if (calls.size() == 1) {
      auto task =
          redis_->eval(store_.writeScript(), std::move(calls[0].keys), std::move(calls[0].args));
      auto r = co_await std::move(task);
      co_return replyError(r, "write");
    }
    // One script call per slot, all at once (EVALSHA; EVAL where a node lacks the script).
    const store::RedisScript& script = store_.writeScript();
    std::vector<std::vector<std::string>> commands;
    commands.reserve(calls.size());
    for (const auto& call : calls) {
      std::vector<std::string> argv{"EVALSHA", script.sha1, std::to_string(call.keys.size())};
      argv.insert(argv.end(), call.keys.begin(), call.keys.end());
      argv.insert(argv.end(), call.args.begin(), call.args.end());
      commands.push_back(std::move(argv));
    }
    auto task = all(ctx_, *redis_, commands);
    auto replies = co_await std::move(task);
    for (size_t i = 0; i < replies.size(); ++i) {
      if (replies[i].ok() && replies[i]->isError() && replies[i]->str.rfind("NOSCRIPT", 0) == 0) {
        auto retry = redis_->eval(script, std::move(calls[i].keys), std::move(calls[i].args));
        replies[i] = co_await std::move(retry);
      }
      Status st = replyError(replies[i], "write");
      if (!st.isOk()) co_return st;
    }
    co_return Status::ok();
  }

 private:
  RedisStore& store_;
  net::asio::io_context& ctx_;
  std::unique_ptr<store::AsyncRedis> redis_;
};

std::unique_ptr<Session> RedisStore::session(net::asio::io_context& ctx, WorkerPool&) {
  return std::make_unique<RedisSession>(*this, ctx);
}

}  // namespace

Result<std::unique_ptr<OnlineStore>> openRedisStore(const RedisStoreOptions& options,
                                                    const Clock&) {
  INFERA_ASSIGN_OR_RETURN(store::RedisAddress address, store::parseRedisUrl(options.url));
  if (address.cluster && options.prefix.find_first_of("{}") != std::string::npos) {
    return Status::invalidArgument(
        "the key prefix '" + options.prefix +
        "' has '{' or '}': on a Redis Cluster the store puts each entity's hash tag in its keys");
  }
  auto s = std::make_unique<RedisStore>(options, std::move(address));
  INFERA_RETURN_IF_ERROR(s->open());
  return std::unique_ptr<OnlineStore>(std::move(s));
}

}  // namespace infera::features
