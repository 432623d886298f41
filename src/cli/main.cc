// The `infera` binary: flags and wiring only.

#include <pthread.h>
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "cli/admin_cmd.h"
#include "cli/batches_cmd.h"
#include "cli/features_cmd.h"
#include "cli/home.h"
#include "cli/models_cmd.h"
#include "cli/vectors_cmd.h"
#include "core/log.h"
#include "emulator/emulator.h"
#include "features/features.h"
#include "server/config.h"
#include "server/server.h"
#ifdef INFERA_WITH_SCHED
#include "cli/sched_cmd.h"
#endif

namespace {

using namespace infera;

// Blocks the signals we handle in every thread (call before starting any), then waits for them.
sigset_t handledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

int runServe(std::string config_path, const std::string& log_level, const std::string& data_dir) {
  std::string home;  // serving the platform's data directory (no -c)
  if (config_path.empty()) {
    home = cli::platformHome(data_dir);
    bool created = false;
    auto path = cli::initHome(home, {}, &created);
    if (!path.ok()) {
      std::fprintf(stderr, "%s\n", path.status().message().c_str());
      return 1;
    }
    config_path = *path;
    std::printf(
        "infera: %s %s (the whole platform on emulated engines; edit it there or in the "
        "console)\n",
        created ? "created" : "serving", config_path.c_str());
  } else if (!data_dir.empty()) {
    std::fprintf(stderr, "--data-dir is for serving the platform's data directory: not with -c\n");
    return 1;
  }
  auto cfg = server::loadConfig(config_path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().message().c_str());
    return 1;
  }
  if (!log_level.empty()) cfg->log_level = log_level;
  const int64_t drain_ms = cfg->drain_timeout_ms;
  const char* data_scheme = cfg->listen.tls ? "https" : "http";
  const char* admin_scheme = cfg->admin.tls ? "https" : "http";
  sigset_t set = handledSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto gw = server::Server::start(std::move(*cfg), config_path);
  if (!gw.ok()) {
    std::fprintf(stderr, "cannot start: %s\n", gw.status().message().c_str());
    return 1;
  }
  std::printf("infera gateway: data %s://127.0.0.1:%u  admin %s://127.0.0.1:%u\n", data_scheme,
              (*gw)->port(), admin_scheme, (*gw)->adminPort());
  if (!home.empty()) {
    std::printf(
        "console: %s://127.0.0.1:%u/ui (sign in with the admin token in %s/admin-token; "
        "the CLI on this machine reads it from there)\n",
        admin_scheme, (*gw)->adminPort(), home.c_str());
  }
  std::fflush(stdout);
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGHUP) {
      const Status s = (*gw)->reload();
      std::fprintf(stderr, "reload: %s\n", s.isOk() ? "ok" : s.message().c_str());
      continue;
    }
    const bool drained = (*gw)->drain(std::chrono::milliseconds(drain_ms));
    std::fprintf(stderr, "shutdown: %s\n", drained ? "drained" : "drain deadline passed");
    return 0;
  }
}

int runEmulate(emulator::EmulatorConfig cfg) {
  sigset_t set = handledSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto emu = emulator::Emulator::start(cfg);
  if (!emu.ok()) {
    std::fprintf(stderr, "cannot start emulator: %s\n", emu.status().message().c_str());
    return 1;
  }
  std::printf("infera emulator: %s\n", (*emu)->url().c_str());
  std::fflush(stdout);
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGHUP) continue;
    (*emu)->stop();
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "infera: one platform for AI inference — the ML gateway (OpenAI and KServe APIs, keys, "
      "limits, usage), batch inference, the model registry (MLflow's API), the feature store "
      "(Feast's API), the vector index (Qdrant's API), the web console, the engine emulator and "
      "the GPU scheduler (simulator and Kubernetes).\n`infera serve` with no config runs all of "
      "them in one process from a data directory (docs/operations.md)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "infera 0.1.0");

  std::string config_path;
  std::string log_level;
  std::string data_dir;
  auto* serve = app.add_subcommand(
      "serve",
      "Run the platform (data port + admin port): the components of the config's sections; "
      "without -c, the whole platform from the data directory (created on first run)");
  serve->add_option("-c,--config", config_path, "Config YAML");
  serve->add_option("--data-dir", data_dir,
                    "Without -c: the data directory (env INFERA_HOME; default "
                    "$XDG_DATA_HOME/infera or ~/.local/share/infera)");
  serve->add_option("--log-level", log_level, "trace|debug|info|warn|error|off");
  serve->callback([&] { std::exit(runServe(config_path, log_level, data_dir)); });

  cli::HomeOptions home_options;
  auto* init = app.add_subcommand(
      "init", "Write the platform's data directory (what `infera serve` without -c serves)");
  init->add_option("--data-dir", data_dir,
                   "The data directory (env INFERA_HOME; default $XDG_DATA_HOME/infera or "
                   "~/.local/share/infera)");
  init->add_option("--port", home_options.port, "Data port (default 8080; 0 = any free port)");
  init->add_option("--admin-port", home_options.admin_port,
                   "Admin port (default 9090; 0 = any free port)");
  init->add_flag("--force", home_options.force,
                 "Write the config again over an existing one (kept as infera.yaml.bak)");
  init->callback([&] {
    const std::string home = cli::platformHome(data_dir);
    bool created = false;
    auto path = cli::initHome(home, home_options, &created);
    if (!path.ok()) {
      std::fprintf(stderr, "%s\n", path.status().message().c_str());
      std::exit(1);
    }
    std::printf(created ? "wrote %s\n" : "%s exists: left as it is (--force writes it again)\n",
                path->c_str());
    std::exit(0);
  });

  emulator::EmulatorConfig ecfg;
  std::string emu_config;
  std::string models_csv;
  auto* emulate =
      app.add_subcommand("emulate", "Run the model-server emulator (OpenAI + KServe v2)");
  emulate->add_option("-c,--config", emu_config,
                      "Emulator config YAML (same keys as gateway emulators)");
  emulate->add_option("--host", ecfg.host, "Listen address");
  emulate->add_option("--port", ecfg.port, "Listen port (0 = any free port)");
  emulate->add_option("--workers", ecfg.workers, "Event loops");
  emulate->add_option("--models", models_csv, "Comma-separated model names");
  emulate->add_option("--ttft-ms", ecfg.ttft_ms, "Time to first token");
  emulate->add_option("--token-ms", ecfg.token_ms, "Latency per token after the first");
  emulate->add_option("--max-tokens", ecfg.default_max_tokens,
                      "Tokens when a request sets no max_tokens");
  emulate->add_option("--error-rate", ecfg.faults.error_rate,
                      "Share of requests answered with --error-status");
  emulate->add_option("--error-status", ecfg.faults.error_status, "Status of injected errors");
  emulate->add_option("--latency-ms", ecfg.faults.added_latency_ms,
                      "Latency added before any response");
  emulate->add_option("--hang-rate", ecfg.faults.hang_rate, "Share of requests never answered");
  emulate->add_option("--disconnect-rate", ecfg.faults.disconnect_rate,
                      "Share of streams cut mid-stream");
  emulate->add_option("--disconnect-after", ecfg.faults.disconnect_after_tokens,
                      "Tokens before a cut");
  emulate->add_flag("--engine", ecfg.engine.enabled,
                    "Model one vLLM engine (batching, KV cache with prefix caching, /metrics); "
                    "tune it under engine: in -c (docs/emulator.md)");
  net::TlsServerConfig emu_tls;
  emulate->add_option("--tls-cert", emu_tls.cert_file,
                      "Serve HTTPS with this PEM certificate chain");
  emulate->add_option("--tls-key", emu_tls.key_file, "The certificate's PEM private key");
  emulate->add_option("--tls-client-ca", emu_tls.client_ca_file,
                      "Require client certificates signed by these CAs");
  emulate->callback([&] {
    if (!emu_tls.cert_file.empty() || !emu_tls.key_file.empty()) ecfg.tls = emu_tls;
    if (!emu_config.empty()) {
      auto root = loadYamlFile(emu_config);
      if (!root.ok()) {
        std::fprintf(stderr, "%s\n", root.status().message().c_str());
        std::exit(1);
      }
      ConfigErrors errors;
      ConfigReader r(*root, &errors);
      emulator::readEmulatorConfig(r, ecfg);
      r.finish();
      if (!errors.empty()) {
        std::fprintf(stderr, "%s\n", errors.toStatus(emu_config).message().c_str());
        std::exit(1);
      }
    }
    if (!models_csv.empty()) {
      ecfg.models.clear();
      size_t start = 0;
      while (start <= models_csv.size()) {
        const size_t comma = models_csv.find(',', start);
        const std::string m = models_csv.substr(
            start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!m.empty()) ecfg.models.push_back(m);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    std::exit(runEmulate(ecfg));
  });

  auto* config = app.add_subcommand("config", "Configuration tools");
  config->require_subcommand(1);
  std::string validate_path;
  bool syntax_only = false;
  auto* validate = config->add_subcommand(
      "validate",
      "Validate a config without binding any port: the file, then (unless --syntax-only) the "
      "paths serving it on this machine would write or read");
  validate->add_option("file", validate_path, "Config YAML")->required();
  validate->add_flag("--syntax-only", syntax_only,
                     "Check the file only, not this machine's paths (a config for another host)");
  validate->callback([&] {
    auto cfg = server::loadConfig(validate_path);
    if (!cfg.ok()) {
      std::fprintf(stderr, "%s\n", cfg.status().message().c_str());
      std::exit(1);
    }
    if (!syntax_only) {
      const auto problems = server::checkHostPaths(*cfg);
      if (!problems.empty()) {
        std::fprintf(stderr,
                     "%s: serving it here would fail (--syntax-only checks the file alone):\n",
                     validate_path.c_str());
        for (const auto& p : problems) std::fprintf(stderr, "  %s\n", p.c_str());
        std::exit(1);
      }
    }
    size_t endpoints = 0;
    for (const auto& m : cfg->gateway.models) {
      for (const auto& d : m.deployments) endpoints += d.endpoints.size();
    }
    std::printf("%s: ok (%zu models, %zu endpoints, %zu emulators)\n", validate_path.c_str(),
                cfg->gateway.models.size(), endpoints, cfg->emulators.size());
    if (cfg->features.enabled && !cfg->features.repository.empty()) {
      auto repo = features::checkRepository(cfg->features.repository);
      if (!repo.ok()) {
        std::fprintf(stderr, "features.repository %s: %s\n", cfg->features.repository.c_str(),
                     repo.status().message().c_str());
        std::exit(1);
      }
      std::printf("features.repository %s: ok (%zu entities, %zu views, %zu feature services)\n",
                  cfg->features.repository.c_str(), repo->entities, repo->views, repo->services);
    }
    std::exit(0);
  });

  infera::cli::registerAdminCommands(app);
  infera::cli::registerFeaturesCommands(app);
  infera::cli::registerVectorsCommands(app);
  infera::cli::registerBatchesCommands(app);
  infera::cli::registerModelCommands(app);

#ifdef INFERA_WITH_SCHED
  infera::cli::registerSchedCommands(app);
#endif

  CLI11_PARSE(app, argc, argv);
  return 0;
}
