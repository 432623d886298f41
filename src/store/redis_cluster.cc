// Routing commands to the node that serves their key: one Redis, or a Redis Cluster's masters.
//
// One Redis is a cluster of one: every command goes to its one node and nothing is ever
// refreshed. On a cluster the slot map (slot -> master) comes from CLUSTER SLOTS, asked of a
// known node (connected ones first, then the seeds); a MOVED reply updates the slot at once and
// refreshes the whole map in the background (at most every kRefreshInterval), ASK sends the one
// command to the importing node after ASKING, TRYAGAIN and CLUSTERDOWN wait kRetryDelay and try
// again. A command that never reached its node (node down: refused, or reconnecting) waits for a
// refreshed map and goes to the slot's new master if there is one; one that was sent and then
// lost its connection is not sent twice (it may have run): its error goes to the caller. So
// during a failover, commands for the failed master's slots fail (fast) until the cluster has
// promoted a replica, and no longer.

#include <algorithm>
#include <array>
#include <charconv>
#include <map>
#include <optional>
#include <thread>

#include "core/log.h"
#include "store/redis.h"
#include "store/redis_internal.h"

namespace infera::store {
namespace {

namespace asio = net::asio;
using boost::system::error_code;
using net::Deadline;
using net::SteadyClock;
using net::Task;

constexpr int kMaxAttempts = 8;  // redirections and retries of one command
constexpr auto kRefreshInterval = std::chrono::milliseconds(100);
constexpr auto kRetryDelay = std::chrono::milliseconds(25);

constexpr std::array<uint16_t, 256> makeCrc16Table() {
  std::array<uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
    t[static_cast<size_t>(i)] = crc;
  }
  return t;
}
constexpr std::array<uint16_t, 256> kCrc16 = makeCrc16Table();

bool equalsUpper(std::string_view a, std::string_view upper) {
  if (a.size() != upper.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char c = a[i] >= 'a' && a[i] <= 'z' ? static_cast<char>(a[i] - 32) : a[i];
    if (c != upper[i]) return false;
  }
  return true;
}

// The key a command is routed by: the first key of EVAL-style commands, none for the commands
// that name no key, argv[1] otherwise.
std::optional<std::string_view> routingKey(const std::vector<std::string>& argv) {
  if (argv.empty()) return std::nullopt;
  const std::string_view cmd = argv[0];
  for (std::string_view e : {"EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL", "FCALL_RO"}) {
    if (equalsUpper(cmd, e)) {
      if (argv.size() < 4 || argv[2] == "0") return std::nullopt;
      return std::string_view(argv[3]);
    }
  }
  for (std::string_view k : {"PING", "INFO", "DBSIZE", "SCRIPT", "CLUSTER", "SCAN", "FLUSHDB",
                             "FLUSHALL", "TIME", "ECHO", "CONFIG", "CLIENT", "COMMAND", "KEYS",
                             "RANDOMKEY", "WAIT", "READONLY", "READWRITE", "ASKING"}) {
    if (equalsUpper(cmd, k)) return std::nullopt;
  }
  if (argv.size() < 2) return std::nullopt;
  return std::string_view(argv[1]);
}

struct Redirect {
  bool ask = false;
  int slot = 0;
  std::string host;
  uint16_t port = 0;
};

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" (host may be an IPv6 address).
std::optional<Redirect> parseRedirect(const RedisReply& r) {
  if (!r.isError()) return std::nullopt;
  Redirect d;
  std::string_view s = r.str;
  if (s.rfind("MOVED ", 0) == 0) {
    s.remove_prefix(6);
  } else if (s.rfind("ASK ", 0) == 0) {
    s.remove_prefix(4);
    d.ask = true;
  } else {
    return std::nullopt;
  }
  const size_t sp = s.find(' ');
  const size_t colon = s.rfind(':');
  if (sp == std::string_view::npos || colon == std::string_view::npos || colon < sp) {
    return std::nullopt;
  }
  int port = 0;
  const std::string_view slot = s.substr(0, sp), port_text = s.substr(colon + 1);
  if (std::from_chars(slot.data(), slot.data() + slot.size(), d.slot).ec != std::errc() ||
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port).ec !=
          std::errc() ||
      d.slot < 0 || d.slot >= kRedisSlots || port <= 0 || port > 65535) {
    return std::nullopt;
  }
  d.host = std::string(s.substr(sp + 1, colon - sp - 1));
  d.port = static_cast<uint16_t>(port);
  return d;
}

bool isRetryLater(const RedisReply& r) {
  return r.isError() && (r.str.rfind("TRYAGAIN", 0) == 0 || r.str.rfind("CLUSTERDOWN", 0) == 0);
}

std::string nodeKey(const std::string& host, uint16_t port) {
  return host + ":" + std::to_string(port);
}

// One range of a CLUSTER SLOTS reply: [start, end, [host, port, id, ...], replicas...].
struct SlotRange {
  int start = 0;
  int end = 0;
  std::string host;
  uint16_t port = 0;
};

// `asked_host` stands in for an empty or "?" host (a node that does not know its own address).
Result<std::vector<SlotRange>> parseClusterSlots(const RedisReply& r,
                                                 const std::string& asked_host) {
  if (r.isError()) return Status::failedPrecondition("CLUSTER SLOTS: " + r.str);
  if (r.type != RedisReply::Type::kArray) return Status::internal("CLUSTER SLOTS: not an array");
  std::vector<SlotRange> out;
  for (const auto& e : r.elements) {
    if (e.type != RedisReply::Type::kArray || e.elements.size() < 3 ||
        e.elements[2].type != RedisReply::Type::kArray || e.elements[2].elements.size() < 2) {
      return Status::internal("CLUSTER SLOTS: unexpected entry");
    }
    SlotRange range;
    range.start = static_cast<int>(e.elements[0].integer);
    range.end = static_cast<int>(e.elements[1].integer);
    const auto& master = e.elements[2].elements;
    range.host = master[0].str;
    if (range.host.empty() || range.host == "?") range.host = asked_host;
    const int64_t port = master[1].integer;
    if (range.start < 0 || range.end >= kRedisSlots || range.start > range.end || port <= 0 ||
        port > 65535) {
      return Status::internal("CLUSTER SLOTS: slot range or port out of bounds");
    }
    range.port = static_cast<uint16_t>(port);
    out.push_back(std::move(range));
  }
  return out;
}

std::vector<std::pair<std::string, uint16_t>> seedsOf(const RedisAddress& a) {
  std::vector<std::pair<std::string, uint16_t>> seeds{{a.host, a.port}};
  seeds.insert(seeds.end(), a.more_seeds.begin(), a.more_seeds.end());
  return seeds;
}

RedisAddress nodeAddress(const RedisAddress& base, const std::string& host, uint16_t port) {
  RedisAddress a = base;
  a.host = host;
  a.port = port;
  a.cluster = false;
  a.more_seeds.clear();
  return a;
}

// ---------------------------------------------------------------------------------------------
// Pipelined

struct RouteState {
  RouteState(asio::io_context& c, RedisAddress a, AsyncRedisOptions o)
      : ctx(c), address(std::move(a)), options(o), refreshed(c), log(componentLogger("store")) {
    refreshed.expires_at(Deadline::max());  // never fires; cancel() wakes the waiters
  }
  asio::io_context& ctx;
  RedisAddress address;
  AsyncRedisOptions options;
  std::map<std::string, std::shared_ptr<NodeState>> nodes;  // by "host:port"
  std::vector<std::shared_ptr<NodeState>> owner;            // by slot; empty until a map is read
  std::shared_ptr<NodeState> single;                        // one Redis: its node
  bool refreshing = false;
  asio::steady_timer refreshed;
  Deadline next_refresh = Deadline::min();
  std::string last_error = "no slot map read yet";
  bool closed = false;
  spdlog::logger* log;

  std::shared_ptr<NodeState> node(const std::string& host, uint16_t port) {
    auto& n = nodes[nodeKey(host, port)];
    if (!n) n = makeNode(ctx, nodeAddress(address, host, port), options);
    return n;
  }
  std::shared_ptr<NodeState> anyNode() {
    for (const auto& n : owner) {
      if (n) return n;
    }
    return nullptr;
  }
};

// Reads the slot map from the first node that answers, connected nodes first, then the seeds,
// then the others. One refresh at a time: callers arriving meanwhile wait for its end. None
// starts within kRefreshInterval of the last one: a caller that needs the news (`wait`) waits
// for its turn, a background refresh is dropped.
Task<void> refreshSlots(std::shared_ptr<RouteState> s, bool wait) {
  if (s->closed) co_return;
  if (s->refreshing) {
    error_code ec;
    co_await s->refreshed.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    co_return;
  }
  if (SteadyClock::now() < s->next_refresh) {
    if (!wait) co_return;
    co_await net::sleepUntil(s->next_refresh);
    if (s->closed) co_return;
    if (s->refreshing) {  // another caller's turn came first: its map is as new
      error_code ec;
      co_await s->refreshed.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      co_return;
    }
  }
  s->refreshing = true;
  std::vector<std::pair<std::string, std::shared_ptr<NodeState>>> order;
  for (const auto& [name, n] : s->nodes) {
    if (nodeConnected(*n)) order.emplace_back(name, n);
  }
  for (const auto& [host, port] : seedsOf(s->address)) {
    order.emplace_back(host, s->node(host, port));
  }
  for (const auto& [name, n] : s->nodes) {
    if (!nodeConnected(*n)) order.emplace_back(name, n);
  }
  const std::vector<std::string> argv{"CLUSTER", "SLOTS"};
  std::string why;
  bool done = false;
  for (size_t i = 0; i < order.size() && !done && !s->closed; ++i) {
    const std::shared_ptr<NodeState>& n = order[i].second;
    if (i > 0 && std::any_of(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(i),
                             [&](const auto& o) { return o.second == n; })) {
      continue;  // asked already
    }
    auto task = nodeCommand(n, argv, false, nullptr);
    auto r = co_await std::move(task);
    if (!r.ok()) {
      why = r.status().message();
      continue;
    }
    const std::string host = order[i].first.substr(0, order[i].first.rfind(':'));
    auto ranges = parseClusterSlots(*r, host);
    if (!ranges.ok()) {
      why = ranges.status().message();
      continue;
    }
    std::vector<std::shared_ptr<NodeState>> owner(kRedisSlots);
    for (const auto& range : *ranges) {
      auto target = s->node(range.host, range.port);
      for (int slot = range.start; slot <= range.end; ++slot) {
        owner[static_cast<size_t>(slot)] = target;
      }
    }
    s->owner = std::move(owner);
    done = true;
  }
  if (!done && !s->closed) {
    s->last_error = "cannot read the cluster's slot map: " + why;
    INFERA_LOG(s->log, warn, "redis cluster: {}", s->last_error);
  }
  s->next_refresh = SteadyClock::now() + kRefreshInterval;
  s->refreshing = false;
  s->refreshed.cancel();
}

Task<Result<RedisReply>> routeCommand(std::shared_ptr<RouteState> s,
                                      std::vector<std::string> argv) {
  if (s->single) {
    auto task = nodeCommand(s->single, argv, false, nullptr);
    auto r = co_await std::move(task);
    if (r.ok() && parseRedirect(*r)) {  // a cluster node given as one Redis
      co_return Status::failedPrecondition("redis " + s->address.host + ":" +
                                           std::to_string(s->address.port) +
                                           " is a Redis Cluster node (it answered " + r->str +
                                           "): give the cluster as redis-cluster://host:port,...");
    }
    co_return r;
  }
  if (s->closed) co_return Status::cancelled("redis client closed");
  const std::optional<std::string_view> key = routingKey(argv);
  const int slot = key ? redisKeySlot(*key) : -1;
  const auto ownerOf = [&]() -> std::shared_ptr<NodeState> {
    if (s->owner.empty()) return nullptr;
    return slot >= 0 ? s->owner[static_cast<size_t>(slot)] : s->anyNode();
  };
  std::shared_ptr<NodeState> target;
  bool asking = false;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    if (!target) target = ownerOf();
    if (!target) {
      auto refresh = refreshSlots(s, true);
      co_await std::move(refresh);
      target = ownerOf();
      if (!target) {
        co_return Status::unavailable("redis cluster: no node serves slot " + std::to_string(slot) +
                                      " (" + s->last_error + ")");
      }
    }
    bool written = false;
    auto task = nodeCommand(target, argv, asking, &written);
    auto r = co_await std::move(task);
    asking = false;
    if (s->closed) co_return r;
    if (r.ok()) {
      if (auto redirect = parseRedirect(*r)) {
        target = s->node(redirect->host, redirect->port);
        if (redirect->ask) {
          asking = true;
        } else {
          if (s->owner.empty()) s->owner.resize(kRedisSlots);
          s->owner[static_cast<size_t>(redirect->slot)] = target;
          net::spawn(s->ctx, refreshSlots(s, false), "redis slot map");
        }
        continue;
      }
      if (isRetryLater(*r)) {
        co_await net::sleepUntil(SteadyClock::now() + kRetryDelay);
        if (r->str.rfind("CLUSTERDOWN", 0) == 0) {
          auto refresh = refreshSlots(s, true);
          co_await std::move(refresh);
        }
        target = nullptr;
        continue;
      }
      co_return r;
    }
    if (written || r.status().code() != StatusCode::kUnavailable) co_return r;
    // Never sent: its node is down or unreachable. The slot may have a new master by now.
    auto refresh = refreshSlots(s, true);
    co_await std::move(refresh);
    auto next = ownerOf();
    if (!next || next == target) co_return r;
    target = next;
  }
  co_return Status::unavailable("redis cluster: no answer for slot " + std::to_string(slot) +
                                " after " + std::to_string(kMaxAttempts) +
                                " redirections or retries");
}

Task<Result<RedisReply>> routeEval(std::shared_ptr<RouteState> s, const RedisScript& script,
                                   std::vector<std::string> keys, std::vector<std::string> args) {
  std::vector<std::string> argv = evalArgv(script, keys, args);
  auto first = routeCommand(s, argv);
  auto r = co_await std::move(first);
  if (!isNoScript(r)) co_return r;
  argv[0] = "EVAL";
  argv[1] = script.source;
  auto second = routeCommand(s, std::move(argv));
  co_return co_await std::move(second);
}

class RoutedRedis final : public AsyncRedis {
 public:
  RoutedRedis(asio::io_context& ctx, const RedisAddress& address, AsyncRedisOptions options)
      : state_(std::make_shared<RouteState>(ctx, address, options)) {
    if (!address.cluster) state_->single = makeNode(ctx, address, options);
  }
  ~RoutedRedis() override { close(); }

  Task<Result<RedisReply>> command(std::vector<std::string> argv) override {
    return routeCommand(state_, std::move(argv));
  }
  Task<Result<RedisReply>> eval(const RedisScript& script, std::vector<std::string> keys,
                                std::vector<std::string> args) override {
    return routeEval(state_, script, std::move(keys), std::move(args));
  }
  bool connected() const override {
    if (state_->single) return nodeConnected(*state_->single);
    return std::any_of(state_->nodes.begin(), state_->nodes.end(),
                       [](const auto& n) { return nodeConnected(*n.second); });
  }
  void close() override {
    RouteState& s = *state_;
    s.closed = true;
    if (s.single) closeNode(*s.single);
    for (auto& [name, n] : s.nodes) closeNode(*n);
    s.refreshed.cancel();
  }

 private:
  std::shared_ptr<RouteState> state_;
};

// ---------------------------------------------------------------------------------------------
// Blocking (control plane): the same routing, one blocking client per node.

class ClusterClient final : public RedisClient {
 public:
  ClusterClient(RedisAddress address, std::chrono::milliseconds timeout)
      : address_(std::move(address)), timeout_(timeout) {}

  Status refresh() {
    std::string why = "no seed node";
    std::vector<std::pair<std::string, uint16_t>> order;
    for (const auto& [name, c] : clients_) {
      const size_t colon = name.rfind(':');
      order.emplace_back(name.substr(0, colon),
                         static_cast<uint16_t>(std::stoi(name.substr(colon + 1))));
    }
    for (const auto& seed : seedsOf(address_)) order.push_back(seed);
    for (const auto& [host, port] : order) {
      auto c = client(host, port);
      if (!c.ok()) {
        why = c.status().message();
        continue;
      }
      auto r = (*c)->command({"CLUSTER", "SLOTS"});
      if (!r.ok()) {
        why = r.status().message();
        continue;
      }
      auto ranges = parseClusterSlots(*r, host);
      if (!ranges.ok()) {
        why = ranges.status().message();
        continue;
      }
      owner_.assign(kRedisSlots, std::string());
      for (const auto& range : *ranges) {
        for (int slot = range.start; slot <= range.end; ++slot) {
          owner_[static_cast<size_t>(slot)] = nodeKey(range.host, range.port);
        }
      }
      return Status::ok();
    }
    return Status::unavailable("redis cluster: cannot read the slot map: " + why);
  }

  Result<RedisReply> command(const std::vector<std::string>& argv) override {
    if (argv.empty()) return Status::invalidArgument("empty redis command");
    if (owner_.empty()) INFERA_RETURN_IF_ERROR(refresh());
    const std::optional<std::string_view> key = routingKey(argv);
    std::string target = key ? owner_[redisKeySlot(*key)] : anyNode();
    bool asking = false;
    for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
      if (target.empty()) return Status::unavailable("redis cluster: no node serves the slot");
      const size_t colon = target.rfind(':');
      const auto send = [&]() -> Result<RedisReply> {
        INFERA_ASSIGN_OR_RETURN(RedisClient * c,
                                client(target.substr(0, colon),
                                       static_cast<uint16_t>(std::stoi(target.substr(colon + 1)))));
        if (asking) {
          auto a = c->command({"ASKING"});
          if (!a.ok()) return a;
        }
        return c->command(argv);
      };
      Result<RedisReply> r = send();
      asking = false;
      if (r.ok()) {
        if (auto redirect = parseRedirect(*r)) {
          target = nodeKey(redirect->host, redirect->port);
          asking = redirect->ask;
          if (!asking) {
            owner_[static_cast<size_t>(redirect->slot)] = target;
            (void)refresh();
          }
          continue;
        }
        if (isRetryLater(*r)) {
          std::this_thread::sleep_for(kRetryDelay);
          (void)refresh();
          target = key ? owner_[redisKeySlot(*key)] : anyNode();
          continue;
        }
        return r;
      }
      if (r.status().code() != StatusCode::kUnavailable || !refresh().isOk()) return r;
      const std::string next = key ? owner_[redisKeySlot(*key)] : anyNode();
      if (next == target) return r;
      target = next;
    }
    return Status::unavailable("redis cluster: too many redirections");
  }

  Result<std::vector<std::unique_ptr<RedisClient>>> masters() override {
    INFERA_RETURN_IF_ERROR(refresh());
    std::vector<std::string> names(owner_.begin(), owner_.end());
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::vector<std::unique_ptr<RedisClient>> out;
    for (const auto& name : names) {
      if (name.empty()) continue;
      const size_t colon = name.rfind(':');
      INFERA_ASSIGN_OR_RETURN(
          auto c, connectNode(nodeAddress(address_, name.substr(0, colon),
                                          static_cast<uint16_t>(std::stoi(name.substr(colon + 1)))),
                              timeout_));
      out.push_back(std::move(c));
    }
    return out;
  }

 private:
  std::string anyNode() const {
    for (const auto& n : owner_) {
      if (!n.empty()) return n;
    }
    return {};
  }

  Result<RedisClient*> client(const std::string& host, uint16_t port) {
    auto& c = clients_[nodeKey(host, port)];
    if (!c) {
      INFERA_ASSIGN_OR_RETURN(c, connectNode(nodeAddress(address_, host, port), timeout_));
    }
    return c.get();
  }

  RedisAddress address_;
  std::chrono::milliseconds timeout_;
  std::map<std::string, std::unique_ptr<RedisClient>> clients_;
  std::vector<std::string> owner_;  // "host:port" by slot
};

}  // namespace

uint16_t redisKeySlot(std::string_view key) {
  if (const size_t open = key.find('{'); open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  uint16_t crc = 0;
  for (const char ch : key) {
    crc = static_cast<uint16_t>((crc << 8) ^
                                kCrc16[((crc >> 8) ^ static_cast<unsigned char>(ch)) & 0xff]);
  }
  return static_cast<uint16_t>(crc & (kRedisSlots - 1));
}

std::unique_ptr<AsyncRedis> AsyncRedis::create(net::asio::io_context& ctx,
                                               const RedisAddress& address,
                                               AsyncRedisOptions options) {
  return std::make_unique<RoutedRedis>(ctx, address, options);
}

Result<std::unique_ptr<RedisClient>> RedisClient::connect(const RedisAddress& address,
                                                          std::chrono::milliseconds timeout) {
  if (!address.cluster) return connectNode(address, timeout);
  auto c = std::make_unique<ClusterClient>(address, timeout);
  INFERA_RETURN_IF_ERROR(c->refresh());
  return std::unique_ptr<RedisClient>(std::move(c));
}

}  // namespace infera::store
