#pragma once
// Redis clients on hiredis: a blocking one for control-plane code and tools, and a pipelined
// asynchronous one that lives on one event loop for the data plane (one connection per loop,
// commands from many coroutines interleaved and answered in order).

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "net/asio.h"

namespace infera::store {

struct RedisAddress {
  std::string host = "127.0.0.1";
  uint16_t port = 6379;
  std::string user;  // ACL user (Redis 6+); AUTH user password when set
  std::string password;
  int db = 0;
  // Redis Cluster: `host:port` is the first seed node, `more_seeds` the others. The clients
  // read the slot map from the first seed that answers CLUSTER SLOTS, route every command to
  // the master of its key's slot, and follow MOVED and ASK (docs/features.md "Redis Cluster").
  bool cluster = false;
  std::vector<std::pair<std::string, uint16_t>> more_seeds;
};

// "redis://[[user]:password@]host[:port][/db]" (user and password percent-decoded; a user-info
// part without ':' is the password, as redis-cli reads it), or
// "redis-cluster://[[user]:password@]host[:port][,host[:port]...]" for a Redis Cluster (seed
// nodes; no database number: a cluster has only database 0).
Result<RedisAddress> parseRedisUrl(std::string_view url);

// The cluster slot (0-16383) of `key`: CRC16 (XMODEM) of the key, or of its hash tag (the part
// between the first '{' and the next '}', when not empty), modulo 16384, as Redis computes it.
uint16_t redisKeySlot(std::string_view key);
inline constexpr int kRedisSlots = 16384;

struct RedisReply {
  enum class Type { kNil, kInteger, kString, kStatus, kArray, kError };
  Type type = Type::kNil;
  int64_t integer = 0;
  std::string str;  // string, status or error text
  std::vector<RedisReply> elements;
  bool isError() const { return type == Type::kError; }
};

// A Lua script sent as EVALSHA, and as EVAL once when the server answers NOSCRIPT.
struct RedisScript {
  explicit RedisScript(std::string source);
  std::string source;
  std::string sha1;  // hex
};

// Blocking client. Reconnects on the next command after a failure.
class RedisClient {
 public:
  static Result<std::unique_ptr<RedisClient>> connect(
      const RedisAddress& address, std::chrono::milliseconds timeout = std::chrono::seconds(2));
  virtual ~RedisClient() = default;
  // A Redis error reply is returned as a RedisReply of type kError (not a failed Result); a
  // failed Result means the server could not be reached or the connection broke.
  virtual Result<RedisReply> command(const std::vector<std::string>& argv) = 0;
  // EVALSHA, and EVAL once when the server answers NOSCRIPT.
  Result<RedisReply> eval(const RedisScript& script, const std::vector<std::string>& keys,
                          const std::vector<std::string>& args);
  // One client per master (the server itself when not a cluster), for what runs on every node:
  // SCAN, DBSIZE, INFO, FLUSHDB.
  virtual Result<std::vector<std::unique_ptr<RedisClient>>> masters() = 0;
};

struct AsyncRedisOptions {
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds command_timeout{100};    // per command, from when it is queued
  std::chrono::milliseconds reconnect_backoff{500};  // no reconnect attempt more often than this
  size_t max_pending =
      65536;  // commands queued or in flight; past it command() is kResourceExhausted
};

// Pipelined client bound to one io_context; every method must be called on that context's thread.
// A command goes to the node that serves its key (argv[1]; for EVAL and EVALSHA the first key;
// keyless commands to any node): with one Redis that is always the server; on a cluster
// (RedisAddress::cluster) the master of the key's slot, with one pipelined connection per node,
// MOVED and ASK followed and the slot map refreshed in the background. Every key of one command
// must be in one slot on a cluster (hash tags), as Redis requires; a command that could not be
// sent because its node is down is retried on the slot's new master once the map says so.
// While the server is unreachable, commands fail at once with kUnavailable (no queueing), and a
// reconnect is tried at most once per reconnect_backoff. A command that times out breaks the
// connection (replies would no longer match their commands): it fails with kDeadlineExceeded, and
// so do the others already sent (the server may still run them); those not yet written fail with
// kUnavailable. The connection is made by the first command (AUTH and
// SELECT included, within connect_timeout); commands issued while an attempt is in progress wait
// for its outcome rather than fail. eval() reads `script` after suspending: keep it alive until
// the task completes. Destroying the client closes it; its coroutines finish on the context.
class AsyncRedis {
 public:
  static std::unique_ptr<AsyncRedis> create(net::asio::io_context& ctx, const RedisAddress& address,
                                            AsyncRedisOptions options = {});
  virtual ~AsyncRedis() = default;
  virtual net::Task<Result<RedisReply>> command(std::vector<std::string> argv) = 0;
  virtual net::Task<Result<RedisReply>> eval(const RedisScript& script,
                                             std::vector<std::string> keys,
                                             std::vector<std::string> args) = 0;
  virtual bool connected() const = 0;
  // Closes the connection; commands in flight fail with kCancelled. Call before the context stops.
  virtual void close() = 0;
};

// Runs the calls at once (on a cluster, each goes to its own node) and waits for every answer;
// the results in the calls' order. One call is simply awaited.
net::Task<std::vector<Result<RedisReply>>> awaitAll(
    net::asio::io_context& ctx, std::vector<net::Task<Result<RedisReply>>> calls);

}  // namespace infera::store
