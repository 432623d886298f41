// The scale-out online store: one Redis string per (view, entity) holding the row, under
// "<prefix><view id>:<entity key>", with a key expiry at event time + ttl + retain_expired so
// memory is reclaimed. A request's reads are one MGET (every view and entity: one round trip);
// a write is one EVALSHA of lua/write_newest.lua (newest event wins, per key, atomically).
// Loops use their own pipelined AsyncRedis; the blocking methods share one RedisClient.

#include <mutex>

#include "features/internal/lua_scripts.h"
#include "features/internal/online_store.h"
#include "features/internal/pool.h"
#include "store/redis.h"

namespace infera::features {
namespace {

using store::RedisReply;

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
    std::string k = options_.prefix + std::to_string(view) + ":";
    k.append(key);
    return k;
  }

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
    std::string cursor = "0";
    do {
      auto r = client_->command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      INFERA_RETURN_IF_ERROR(replyError(r, "scan"));
      if (r->elements.size() != 2) return Status::internal("redis scan: unexpected reply");
      cursor = r->elements[0].str;
      std::vector<std::string> del{"UNLINK"};
      for (auto& e : r->elements[1].elements) del.push_back(std::move(e.str));
      if (del.size() > 1) INFERA_RETURN_IF_ERROR(replyError(client_->command(del), "unlink"));
    } while (cursor != "0");
    return Status::ok();
  }

  void scriptArgs(const std::vector<RowWrite>& rows, std::vector<std::string>& keys,
                  std::vector<std::string>& args) const {
    keys.reserve(rows.size());
    args.reserve(rows.size() * 2);
    for (const auto& r : rows) {
      keys.push_back(keyOf(r.view, r.key));
      args.push_back(r.row);
      args.push_back(
          std::to_string(r.expire_at_us > 0 ? std::max<int64_t>(r.expire_at_us / 1000, 1) : 0));
    }
  }

  Status write(std::vector<RowWrite> rows) override { return run(write_script_, rows); }
  Status put(std::vector<RowWrite> rows) override { return run(put_script_, rows); }

  Status read(std::span<const ReadKey> keys, std::vector<std::string>& rows) override {
    rows.assign(keys.size(), std::string());
    if (keys.empty()) return Status::ok();
    std::vector<std::string> argv{"MGET"};
    for (const auto& k : keys) argv.push_back(keyOf(k.view, k.key));
    std::lock_guard<std::mutex> lock(mu_);
    auto r = client_->command(argv);
    return takeRows(r, rows);
  }

  static Status takeRows(Result<RedisReply>& r, std::vector<std::string>& rows) {
    INFERA_RETURN_IF_ERROR(replyError(r, "mget"));
    if (r->elements.size() != rows.size()) return Status::internal("redis mget: unexpected reply");
    for (size_t i = 0; i < rows.size(); ++i) {
      if (r->elements[i].type == RedisReply::Type::kString) rows[i] = std::move(r->elements[i].str);
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

  StoreStats stats() override {
    StoreStats st;
    std::lock_guard<std::mutex> lock(mu_);
    auto n = client_->command({"DBSIZE"});
    if (n.ok() && n->type == RedisReply::Type::kInteger) st.keys = n->integer;
    auto info = client_->command({"INFO", "memory"});
    if (info.ok()) {
      const size_t at = info->str.find("used_memory:");
      if (at != std::string::npos) st.bytes = std::stoll(info->str.substr(at + 12));
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
    std::vector<std::string> keys, args;
    scriptArgs(rows, keys, args);
    std::lock_guard<std::mutex> lock(mu_);
    return replyError(client_->eval(script, keys, args), "write");
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
  RedisSession(RedisStore& store, net::asio::io_context& ctx) : store_(store) {
    store::AsyncRedisOptions o;
    o.command_timeout = std::chrono::milliseconds(store.timeoutMs());
    redis_ = store::AsyncRedis::create(ctx, store.address(), o);
  }
  ~RedisSession() override { redis_->close(); }

  net::Task<Status> read(std::span<const ReadKey> keys, std::vector<std::string>& rows) override {
    rows.assign(keys.size(), std::string());
    if (keys.empty()) co_return Status::ok();
    std::vector<std::string> argv;
    argv.reserve(keys.size() + 1);
    argv.emplace_back("MGET");
    for (const auto& k : keys) argv.push_back(store_.keyOf(k.view, k.key));
    auto task = redis_->command(std::move(argv));
    auto r = co_await std::move(task);
    co_return RedisStore::takeRows(r, rows);
  }

  net::Task<Status> write(std::vector<RowWrite> rows) override {
    if (rows.empty()) co_return Status::ok();
    std::vector<std::string> keys, args;
    store_.scriptArgs(rows, keys, args);
    auto task = redis_->eval(store_.writeScript(), std::move(keys), std::move(args));
    auto r = co_await std::move(task);
    co_return replyError(r, "write");
  }

 private:
  RedisStore& store_;
  std::unique_ptr<store::AsyncRedis> redis_;
};

std::unique_ptr<Session> RedisStore::session(net::asio::io_context& ctx, WorkerPool&) {
  return std::make_unique<RedisSession>(*this, ctx);
}

}  // namespace

Result<std::unique_ptr<OnlineStore>> openRedisStore(const RedisStoreOptions& options,
                                                    const Clock&) {
  INFERA_ASSIGN_OR_RETURN(store::RedisAddress address, store::parseRedisUrl(options.url));
  auto s = std::make_unique<RedisStore>(options, std::move(address));
  INFERA_RETURN_IF_ERROR(s->open());
  return std::unique_ptr<OnlineStore>(std::move(s));
}

}  // namespace infera::features
