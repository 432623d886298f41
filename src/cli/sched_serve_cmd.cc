// Flags and wiring only: `infera sched serve|validate-serve` (the work is in src/scheduler/kube).
#include <pthread.h>
#include <sys/stat.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/sched_cmd.h"
#include "core/log.h"
#include "scheduler/kube/kube.h"

namespace infera::cli {
namespace {

struct FileStamp {
  bool exists = false;
  ino_t inode = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp stampOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return FileStamp{true, st.st_ino, st.st_size,
                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

void reload(sched::kube::KubeScheduler& server, const std::string& path, const char* why) {
  const Status s = server.reloadFile(path);
  if (s.isOk()) {
    std::fprintf(stderr, "reload (%s): applied %s\n", why, path.c_str());
  } else {
    std::fprintf(stderr, "reload (%s): %s (still running the previous config)\n", why,
                 s.message().c_str());
  }
}

int runServe(const std::string& path, const std::string& log_level) {
  if (!log_level.empty() && !setLogLevel(log_level)) {
    std::fprintf(stderr, "unknown log level '%s'\n", log_level.c_str());
    return 1;
  }
  auto cfg = sched::kube::loadServeConfigFile(path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().message().c_str());
    return 1;
  }
  const bool webhook = cfg->webhook.enabled;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto server = sched::kube::KubeScheduler::create(std::move(*cfg));
  if (!server.ok()) {
    std::fprintf(stderr, "cannot start: %s\n", server.status().message().c_str());
    return 1;
  }
  const Status started = (*server)->start();
  if (!started.isOk()) {
    std::fprintf(stderr, "cannot start: %s\n", started.message().c_str());
    return 1;
  }
  std::printf("infera scheduler: metrics http://127.0.0.1:%u", (*server)->metricsPort());
  if (webhook) std::printf("  webhook https://127.0.0.1:%u", (*server)->webhookPort());
  std::printf("\n");
  std::fflush(stdout);
  // Reloads on SIGHUP and when the file changes (a ConfigMap update swaps the file under its
  // mount): looked at every second by inode, size and modification time.
  FileStamp seen = stampOf(path);
  for (;;) {
    const timespec tick{1, 0};
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig < 0) {
      const FileStamp now = stampOf(path);
      if (now == seen) continue;
      seen = now;
      if (!now.exists) continue;  // mid-swap: the new file comes next
      reload(**server, path, "the file changed");
      continue;
    }
    if (sig == SIGHUP) {
      seen = stampOf(path);
      reload(**server, path, "SIGHUP");
      continue;
    }
    (*server)->stop();
    std::fprintf(stderr, "shutdown: stopped\n");
    return 0;
  }
}

int runValidateServe(const std::vector<std::string>& files) {
  int rc = 0;
  for (const auto& f : files) {
    const auto cfg = sched::kube::loadServeConfigFile(f);
    if (cfg.ok()) {
      std::printf("%s: ok (scheduler %s, %zu queues, %zu placement rules, webhook %s)\n", f.c_str(),
                  cfg->kube.scheduler_name.c_str(), cfg->scheduling.queues.size(),
                  cfg->scheduling.placement.size(), cfg->webhook.enabled ? "on" : "off");
    } else {
      std::fprintf(stderr, "%s\n", cfg.status().message().c_str());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace

void registerSchedServeCommands(CLI::App& sched) {
  auto config = std::make_shared<std::string>();
  auto log_level = std::make_shared<std::string>();
  CLI::App* serve = sched.add_subcommand(
      "serve", "run the Kubernetes scheduler (watch, place, bind, preempt) and its webhook");
  serve->add_option("-c,--config", *config, "sched.yaml (docs/kubernetes.md)")->required();
  serve->add_option("--log-level", *log_level, "trace|debug|info|warn|error|off");
  serve->callback([config, log_level] { std::exit(runServe(*config, *log_level)); });

  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* val = sched.add_subcommand("validate-serve", "validate sched.yaml files of `serve`");
  val->add_option("files", *files, "YAML files")->required();
  val->callback([files] { std::exit(runValidateServe(*files)); });
}

}  // namespace infera::cli
