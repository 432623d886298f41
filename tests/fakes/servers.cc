#include "fakes/servers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace infera::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kStartAttempts = 5;  // each with a fresh port, in case another process took ours
constexpr auto kStartTimeout = std::chrono::seconds(10);
constexpr auto kPollInterval = std::chrono::milliseconds(5);

void printTail(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > 40) lines.pop_front();
  }
  std::fprintf(stderr, "---- %s: last lines of %s ----\n", what.c_str(), path.c_str());
  for (const auto& l : lines) std::fprintf(stderr, "%s\n", l.c_str());
  std::fprintf(stderr, "---- end of %s ----\n", path.c_str());
}

std::string makeTempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "mkdtemp(%s) failed: %s\n", tmpl.c_str(), std::strerror(errno));
    return {};
  }
  return tmpl;
}

std::string findInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  dirs += ":/usr/sbin:/sbin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

// fork + exec with stdout and stderr appended to `log_path`, stdin from /dev/null, in `cwd`.
// Everything the child needs is prepared before fork(): between fork and exec only
// async-signal-safe calls (the test process may have other threads).
pid_t spawnProcess(const std::vector<std::string>& argv, const std::string& log_path,
                   const std::string& cwd, bool die_with_parent) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "fork failed: %s\n", std::strerror(errno));
    return -1;
  }
  if (pid > 0) return pid;
  if (die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
  }
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  const int null = ::open("/dev/null", O_RDONLY);
  if (log < 0 || null < 0) ::_exit(125);
  ::dup2(null, 0);
  ::dup2(log, 1);
  ::dup2(log, 2);
  if (::chdir(cwd.c_str()) != 0) ::_exit(124);
  ::close_range(3, ~0U, 0);  // no inherited sockets or files in the server
  ::execv(args[0], args.data());
  ::_exit(127);
}

int runProcess(const std::vector<std::string>& argv, const std::string& log_path,
               const std::string& cwd) {
  const pid_t pid = spawnProcess(argv, log_path, cwd, false);
  if (pid < 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Sends an inline command to 127.0.0.1:port and returns what arrives until `until` is seen
// (or 300 ms pass). Empty if nothing listens.
std::string askRedis(uint16_t port, const std::string& inline_command, const std::string& until) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string line = inline_command + "\r\n";
    if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size())) {
      const auto deadline = Clock::now() + std::chrono::milliseconds(300);
      while (got.find(until) == std::string::npos && Clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        char buf[4096];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  return got;
}

void reap(int pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

std::string findPostgresBin() {
  std::string best;
  int best_version = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string name = entry.path().filename().string();
    const int version = std::atoi(name.c_str());
    const std::string bin = entry.path().string() + "/bin";
    if (version > best_version && ::access((bin + "/initdb").c_str(), X_OK) == 0 &&
        ::access((bin + "/pg_ctl").c_str(), X_OK) == 0) {
      best_version = version;
      best = bin;
    }
  }
  return best;
}

// PostgreSQL refuses to run as root: then its tools run as the postgres user.
std::vector<std::string> asPostgresUser() {
  if (::geteuid() != 0) return {};
  const std::string runuser = findInPath("runuser");
  return {runuser.empty() ? "/usr/sbin/runuser" : runuser, "-u", "postgres", "--"};
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

uint16_t freeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// ---------------------------------------------------------------------------------------------
// RedisServer

std::unique_ptr<RedisServer> RedisServer::start(bool cluster_node) {
  std::unique_ptr<RedisServer> s(new RedisServer());
  s->cluster_node_ = cluster_node;
  s->dir_ = makeTempDir("infera-redis-");
  if (s->dir_.empty()) return nullptr;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    s->port_ = freeLoopbackPort();
    s->bus_port_ = cluster_node ? freeLoopbackPort() : 0;
    if (s->port_ != 0 && (!cluster_node || (s->bus_port_ != 0 && s->bus_port_ != s->port_)) &&
        s->launch()) {
      return s;
    }
  }
  std::fprintf(stderr, "redis-server did not start after %d attempts\n", kStartAttempts);
  return nullptr;
}

bool RedisServer::launch() {
  const std::string binary = findInPath("redis-server");
  if (binary.empty()) {
    std::fprintf(stderr, "redis-server not found in PATH (scripts/install-deps.sh installs it)\n");
    return false;
  }
  const std::string log = dir_ + "/redis.log";
  std::vector<std::string> argv{binary,
                                "--port",
                                std::to_string(port_),
                                "--bind",
                                "127.0.0.1",
                                "--dir",
                                dir_,
                                "--save",
                                "",
                                "--appendonly",
                                "no",
                                "--daemonize",
                                "no",
                                "--protected-mode",
                                "no"};
  if (cluster_node_) {
    argv.insert(argv.end(),
                {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "1000", "--cluster-port", std::to_string(bus_port_),
                 // a replica's first sync starts at once (default: 5 s of waiting
                 // for more replicas)
                 "--repl-diskless-sync-delay", "0"});
  }
  pid_ = spawnProcess(argv, log, dir_, true);
  if (pid_ < 0) return false;
  // Ready when it answers on the port, and it is this server that answers (another process may
  // have taken the port after freeLoopbackPort() let it go).
  const std::string expect = "process_id:" + std::to_string(pid_) + "\r\n";
  const auto deadline = Clock::now() + kStartTimeout;
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      printTail(log, "redis-server exited during start-up");
      pid_ = -1;
      return false;
    }
    if (askRedis(port_, "INFO server", expect).find(expect) != std::string::npos) return true;
    std::this_thread::sleep_for(kPollInterval);
  }
  printTail(log, "redis-server did not answer within 10 s");
  kill();
  return false;
}

RedisServer::~RedisServer() {
  if (pid_ > 0) {
    if (paused_) ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(3);
    bool exited = false;
    while (!exited && Clock::now() < deadline) {
      int status = 0;
      exited = ::waitpid(pid_, &status, WNOHANG) == pid_;
      if (!exited) std::this_thread::sleep_for(kPollInterval);
    }
    if (!exited) {
      ::kill(pid_, SIGKILL);
      reap(pid_);
    }
  }
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::string RedisServer::url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  reap(pid_);  // reaped: the kernel has closed its sockets
  pid_ = -1;
  paused_ = false;
}

bool RedisServer::restart() {
  kill();
  return launch();
}

void RedisServer::pause() {
  if (pid_ <= 0 || paused_) return;
  ::kill(pid_, SIGSTOP);
  int status = 0;
  ::waitpid(pid_, &status, WUNTRACED);  // returns once it has stopped
  paused_ = true;
}

void RedisServer::resume() {
  if (pid_ <= 0 || !paused_) return;
  ::kill(pid_, SIGCONT);
  int status = 0;
  ::waitpid(pid_, &status, WCONTINUED);
  paused_ = false;
}

// ---------------------------------------------------------------------------------------------
// RedisCluster

namespace {

// The payload of a RESP bulk-string reply ("$N\r\n<payload>\r\n"), or empty.
std::string bulkPayload(const std::string& reply) {
  if (reply.empty() || reply[0] != '$') return {};
  const size_t eol = reply.find("\r\n");
  if (eol == std::string::npos) return {};
  const int n = std::atoi(reply.c_str() + 1);
  if (n <= 0 || reply.size() < eol + 2 + static_cast<size_t>(n)) return {};
  return reply.substr(eol + 2, static_cast<size_t>(n));
}

}  // namespace

std::unique_ptr<RedisCluster> RedisCluster::start(int masters, int replicas) {
  std::unique_ptr<RedisCluster> c(new RedisCluster());
  c->dir_ = makeTempDir("infera-redis-cluster-");
  if (c->dir_.empty()) return nullptr;
  c->log_ = c->dir_ + "/redis-cli.log";
  std::vector<std::string> argv{findInPath("redis-cli"), "--cluster", "create"};
  if (argv[0].empty()) {
    std::fprintf(stderr, "redis-cli not found in PATH (scripts/install-deps.sh installs it)\n");
    return nullptr;
  }
  for (int i = 0; i < masters * (1 + replicas); ++i) {
    auto node = RedisServer::start(true);
    if (!node) return nullptr;
    argv.push_back("127.0.0.1:" + std::to_string(node->port()));
    c->nodes_.push_back(std::move(node));
  }
  argv.insert(argv.end(), {"--cluster-replicas", std::to_string(replicas), "--cluster-yes"});
  if (const int rc = runProcess(argv, c->log_, c->dir_); rc != 0) {
    printTail(c->log_, "redis-cli --cluster create exited with " + std::to_string(rc));
    return nullptr;
  }
  if (!c->waitHealthy(std::chrono::seconds(20))) {
    printTail(c->log_, "the cluster did not become healthy within 20 s");
    return nullptr;
  }
  return c;
}

std::string RedisCluster::url() const {
  std::string u = "redis-cluster://";
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i > 0) u += ",";
    u += "127.0.0.1:" + std::to_string(nodes_[i]->port());
  }
  return u;
}

std::string RedisCluster::nodeId(size_t i) const {
  return bulkPayload(askRedis(nodes_[i]->port(), "CLUSTER MYID", "\r\n"));
}

int RedisCluster::masterOf(uint16_t slot, size_t asked) const {
  // CLUSTER NODES: "<id> <ip:port@bus> <flags> <master> ... <slot ranges...>" per line.
  const std::string reply = askRedis(nodes_[asked]->port(), "CLUSTER NODES", "\n\r\n");
  std::string text = bulkPayload(reply);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.size() < 9 || w[2].find("master") == std::string::npos ||
        w[2].find("fail") != std::string::npos) {
      continue;
    }
    for (size_t k = 8; k < w.size(); ++k) {
      if (w[k].front() == '[') continue;  // a slot being migrated
      const size_t dash = w[k].find('-');
      const int lo = std::atoi(w[k].c_str());
      const int hi = dash == std::string::npos ? lo : std::atoi(w[k].c_str() + dash + 1);
      if (slot < lo || slot > hi) continue;
      const std::string port = w[1].substr(w[1].rfind(':') + 1);
      for (size_t n = 0; n < nodes_.size(); ++n) {
        if (std::to_string(nodes_[n]->port()) == port.substr(0, port.find('@'))) {
          return static_cast<int>(n);
        }
      }
    }
  }
  return -1;
}

int RedisCluster::reshard(size_t from, size_t to, int slots) {
  return runProcess(
      {findInPath("redis-cli"), "--cluster", "reshard",
       "127.0.0.1:" + std::to_string(nodes_[from]->port()), "--cluster-from", nodeId(from),
       "--cluster-to", nodeId(to), "--cluster-slots", std::to_string(slots), "--cluster-yes"},
      log_, dir_);
}

bool RedisCluster::waitHealthy(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    bool ok = true;
    for (const auto& n : nodes_) {
      if (!n->running()) continue;
      const std::string info = askRedis(n->port(), "CLUSTER INFO", "cluster_stats_messages");
      if (info.find("cluster_state:ok") == std::string::npos ||
          info.find("cluster_slots_ok:16384") == std::string::npos) {
        ok = false;
        break;
      }
      const std::string repl = askRedis(n->port(), "INFO replication", "master_repl_offset");
      if (repl.find("role:slave") != std::string::npos &&
          repl.find("master_link_status:up") == std::string::npos) {
        ok = false;
        break;
      }
    }
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// PostgresServer

std::unique_ptr<PostgresServer> PostgresServer::start(bool durable) {
  const std::string bin = findPostgresBin();
  if (bin.empty()) {
    std::fprintf(
        stderr, "no PostgreSQL server under /usr/lib/postgresql/*/bin (scripts/install-deps.sh)\n");
    return nullptr;
  }
  std::unique_ptr<PostgresServer> s(new PostgresServer());
  s->durable_ = durable;
  s->dir_ = makeTempDir("infera-pg-");
  if (s->dir_.empty()) return nullptr;
  ::chmod(s->dir_.c_str(), 0700);
  if (::geteuid() == 0) {
    const passwd* pw = ::getpwnam("postgres");
    if (pw == nullptr) {
      std::fprintf(stderr, "running as root, but there is no 'postgres' user to run PostgreSQL\n");
      return nullptr;
    }
    if (::chown(s->dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      std::fprintf(stderr, "chown %s to postgres failed: %s\n", s->dir_.c_str(),
                   std::strerror(errno));
      return nullptr;
    }
  }
  const auto prefix = asPostgresUser();
  const std::string data = s->dir_ + "/data";
  const std::string initdb_log = s->dir_ + "/initdb.log";
  const int rc = runProcess(concat(prefix, {bin + "/initdb", "-D", data, "-A", "trust", "-U",
                                            "postgres", "--no-sync", "-E", "UTF8", "--locale=C"}),
                            initdb_log, s->dir_);
  if (rc != 0) {
    printTail(initdb_log, "initdb failed with exit code " + std::to_string(rc));
    return nullptr;
  }
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    s->port_ = freeLoopbackPort();
    if (s->port_ == 0) continue;
    if (s->launch()) return s;
  }
  return nullptr;
}

bool PostgresServer::launch() {
  const std::string bin = findPostgresBin();
  const std::string server_log = dir_ + "/log";
  const std::string ctl_log = dir_ + "/pg_ctl.log";
  const std::string options =
      "-p " + std::to_string(port_) + " -k " + dir_ + " -c listen_addresses=127.0.0.1" +
      (durable_ ? std::string()
                : " -c fsync=off -c synchronous_commit=off -c full_page_writes=off");
  const int ctl =
      runProcess(concat(asPostgresUser(), {bin + "/pg_ctl", "-D", dir_ + "/data", "-l", server_log,
                                           "-w", "-t", "60", "-o", options, "start"}),
                 ctl_log, dir_);
  if (ctl == 0) {
    started_ = true;
    return true;
  }
  printTail(server_log, "PostgreSQL did not start on port " + std::to_string(port_));
  printTail(ctl_log, "pg_ctl start");
  return false;
}

bool PostgresServer::stop() {
  if (!started_) return true;
  const int rc =
      runProcess(concat(asPostgresUser(), {findPostgresBin() + "/pg_ctl", "-D", dir_ + "/data",
                                           "-m", "immediate", "-w", "stop"}),
                 dir_ + "/pg_ctl.log", dir_);
  if (rc != 0) {
    printTail(dir_ + "/pg_ctl.log", "pg_ctl stop failed");
    return false;
  }
  started_ = false;
  return true;
}

bool PostgresServer::restart() {
  if (started_ && !stop()) return false;
  return launch();
}

PostgresServer::~PostgresServer() {
  if (started_) {
    const std::string bin = findPostgresBin();
    const int rc = runProcess(concat(asPostgresUser(), {bin + "/pg_ctl", "-D", dir_ + "/data", "-m",
                                                        "immediate", "-w", "stop"}),
                              dir_ + "/pg_ctl.log", dir_);
    if (rc != 0) printTail(dir_ + "/pg_ctl.log", "pg_ctl stop failed");
  }
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::string PostgresServer::url(const std::string& db) const {
  return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + db;
}

bool PostgresServer::createDatabase(const std::string& name) {
  PGconn* conn = PQconnectdb(url("postgres").c_str());
  bool ok = false;
  if (PQstatus(conn) != CONNECTION_OK) {
    std::fprintf(stderr, "createDatabase: cannot connect: %s\n", PQerrorMessage(conn));
  } else {
    char* ident = PQescapeIdentifier(conn, name.c_str(), name.size());
    const std::string sql = std::string("CREATE DATABASE ") + (ident != nullptr ? ident : "");
    PQfreemem(ident);
    PGresult* r = PQexec(conn, sql.c_str());
    ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok) std::fprintf(stderr, "createDatabase(%s): %s\n", name.c_str(), PQerrorMessage(conn));
    PQclear(r);
  }
  PQfinish(conn);
  return ok;
}

// ---------------------------------------------------------------------------
// ServeProcess

std::unique_ptr<ServeProcess> ServeProcess::start(const std::string& binary,
                                                  const std::string& config,
                                                  const std::string& log) {
  std::unique_ptr<ServeProcess> p(new ServeProcess());
  {
    std::ofstream truncate(log, std::ios::trunc);  // a restart must not read the last run's ports
  }
  p->pid_ = spawnProcess({binary, "serve", "-c", config}, log, "/", true);
  if (p->pid_ < 0) return nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line)) {
      const size_t data = line.find("data http://127.0.0.1:");
      const size_t admin = line.find("admin http://127.0.0.1:");
      if (data != std::string::npos && admin != std::string::npos) {
        p->port_ = static_cast<uint16_t>(std::atoi(line.c_str() + data + 22));
        p->admin_port_ = static_cast<uint16_t>(std::atoi(line.c_str() + admin + 23));
        return p;
      }
    }
    int status = 0;
    if (::waitpid(p->pid_, &status, WNOHANG) == p->pid_) {
      std::ifstream out(log);
      const std::string text((std::istreambuf_iterator<char>(out)),
                             std::istreambuf_iterator<char>());
      std::fprintf(stderr,
                   "infera serve (%s) exited (status %d) before it served; its output (%s):\n%s\n",
                   binary.c_str(), WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                   log.c_str(), text.c_str());
      p->pid_ = -1;
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "infera serve did not print its ports within 20 s (%s)\n", log.c_str());
  return nullptr;
}

ServeProcess::~ServeProcess() { kill9(); }

void ServeProcess::kill9() {
  if (pid_ < 0) return;
  ::kill(pid_, SIGKILL);
  reap(pid_);
  pid_ = -1;
}

void ServeProcess::stop() {
  if (pid_ < 0) return;
  ::kill(pid_, SIGTERM);
  reap(pid_);
  pid_ = -1;
}

}  // namespace infera::testing
