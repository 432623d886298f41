#pragma once
// Real servers for tests: redis-server and PostgreSQL started on free loopback ports in their own
// temporary directories, ready when start() returns, stopped (and the directory removed) by the
// destructor. Nothing is installed here: scripts/install-deps.sh provides the binaries. A missing
// binary or a server that does not come up is a test failure (start() returns nullptr and says why
// on stderr), never a skip.

#include <cstdint>
#include <memory>
#include <string>

namespace infera::testing {

class RedisServer {
 public:
  static std::unique_ptr<RedisServer> start();
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
  int pid_ = -1;
  bool paused_ = false;
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
