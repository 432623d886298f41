#pragma once
// Real servers for tests: redis-server and PostgreSQL started on free loopback ports in their own
// temporary directories, ready when start() returns, stopped (and the directory removed) by the
// destructor. Nothing is installed here: scripts/install-deps.sh provides the binaries. A missing
// binary or a server that does not come up is a test failure (start() returns nullptr and says why
// on stderr), never a skip.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace infera::testing {

class RedisServer {
 public:
  // `cluster_node`: cluster mode (cluster-enabled, a bus port of its own, nodes.conf in its
  // directory, cluster-node-timeout 1 s); RedisCluster joins such servers into a cluster.
  static std::unique_ptr<RedisServer> start(bool cluster_node = false);
  ~RedisServer();
  uint16_t port() const { return port_; }
  std::string url() const;  // redis://127.0.0.1:PORT
  // SIGKILL (the port stops answering at once); restart() brings it back on the same port.
  void kill();
  bool restart();
  // SIGSTOP / SIGCONT: the server keeps accepting connections (the kernel does) but answers
  // nothing until resumed, like a server stuck in a long command.
  void pause();
  void resume();
  bool running() const { return pid_ > 0; }

 private:
  RedisServer() = default;
  bool launch();
  std::string dir_;
  uint16_t port_ = 0;
  uint16_t bus_port_ = 0;  // cluster nodes only
  bool cluster_node_ = false;
  int pid_ = -1;
  bool paused_ = false;
};

// A real Redis Cluster on loopback: `masters` masters with `replicas` replicas each, joined by
// `redis-cli --cluster create`; ready (every slot served, state ok on every node, every replica
// linked to its master) when start() returns.
class RedisCluster {
 public:
  static std::unique_ptr<RedisCluster> start(int masters = 3, int replicas = 1);
  // redis-cluster://127.0.0.1:P1,127.0.0.1:P2,... (every node a seed)
  std::string url() const;
  size_t size() const { return nodes_.size(); }
  RedisServer& node(size_t i) { return *nodes_[i]; }
  std::string nodeId(size_t i) const;  // CLUSTER MYID
  // The index of the node serving `slot` as a master, as node `asked` sees it; -1 if none.
  int masterOf(uint16_t slot, size_t asked) const;
  // Moves `slots` slots from one master to another with `redis-cli --cluster reshard` (keys
  // migrated while clients keep going). Returns its exit code; its output goes to the log.
  int reshard(size_t from, size_t to, int slots);
  // Every slot served and cluster_state:ok on every running node, within `timeout`.
  bool waitHealthy(std::chrono::milliseconds timeout);
  const std::string& log() const { return log_; }

 private:
  RedisCluster() = default;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::string dir_;
  std::string log_;
};

class PostgresServer {
 public:
  // `durable`: commits reach the disk before they are acknowledged (fsync on, synchronous
  // commits), so data survives stop()'s crash; off by default (faster tests that never crash it).
  static std::unique_ptr<PostgresServer> start(bool durable = false);
  ~PostgresServer();
  uint16_t port() const { return port_; }
  // postgresql://postgres@127.0.0.1:PORT/DB ; createDatabase() makes a fresh one.
  std::string url(const std::string& db = "postgres") const;
  bool createDatabase(const std::string& name);
  // Stops the server at once (pg_ctl -m immediate, like a crash: no clean shutdown) and starts it
  // again on the same port and data (crash recovery runs).
  bool stop();
  bool restart();

 private:
  PostgresServer() = default;
  bool launch();
  std::string dir_;
  uint16_t port_ = 0;
  bool started_ = false;
  bool durable_ = false;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
uint16_t freeLoopbackPort();

// `infera serve -c CONFIG` as a process of its own (a replica, or one to kill -9), its output
// appended to LOG; ready when start() returns (it printed its ports: give it `port: 0` for both).
// The destructor kills it (SIGKILL) if it still runs.
class ServeProcess {
 public:
  // `binary`: the infera binary of the build (tests get it as a compile definition).
  static std::unique_ptr<ServeProcess> start(const std::string& binary, const std::string& config,
                                             const std::string& log);
  ~ServeProcess();
  uint16_t port() const { return port_; }
  uint16_t adminPort() const { return admin_port_; }
  // SIGKILL, and reaped: the process ends at once, with no shutdown of its own.
  void kill9();
  // SIGTERM, and reaped: a clean shutdown.
  void stop();

 private:
  ServeProcess() = default;
  int pid_ = -1;
  uint16_t port_ = 0;
  uint16_t admin_port_ = 0;
};

}  // namespace infera::testing
