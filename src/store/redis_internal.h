#pragma once
// The pieces of redis.cc that redis_cluster.cc routes commands through: one node's pipelined
// connection (NodeState) and one node's blocking client. Not for use outside src/store.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "store/redis.h"

namespace infera::store {

struct NodeState;  // one node's pipelined connection (redis.cc)

std::shared_ptr<NodeState> makeNode(net::asio::io_context& ctx, const RedisAddress& address,
                                    const AsyncRedisOptions& options);
// Sends `argv` to the node (after ASKING when `asking`), as AsyncRedis::command does; `written`
// says whether it reached the socket (the server may have run it) when the result is an error.
// `argv` is read after suspending: keep it alive until the task completes.
net::Task<Result<RedisReply>> nodeCommand(std::shared_ptr<NodeState> node,
                                          const std::vector<std::string>& argv, bool asking,
                                          bool* written);
bool nodeConnected(const NodeState& node);
const std::string& nodeLastError(const NodeState& node);
void closeNode(NodeState& node);

// One server's blocking client (RedisClient::connect routes to it unless `address.cluster`).
Result<std::unique_ptr<RedisClient>> connectNode(const RedisAddress& address,
                                                 std::chrono::milliseconds timeout);

std::vector<std::string> evalArgv(const RedisScript& script, const std::vector<std::string>& keys,
                                  const std::vector<std::string>& args);
bool isNoScript(const Result<RedisReply>& r);

}  // namespace infera::store
