#pragma once
// `infera sched ...`: the GPU scheduler's subcommands (simulate, validate, policies).

#include <CLI/CLI.hpp>

namespace infera::cli {

// Adds the `sched` subcommand tree to `app`. Each subcommand runs from its callback and exits the
// process with 0 on success, 1 on failure (validation errors, bad input).
void registerSchedCommands(CLI::App& app);
// `sched serve` and `sched validate-serve` (the Kubernetes scheduler; sched_serve_cmd.cc).
void registerSchedServeCommands(CLI::App& sched);

}  // namespace infera::cli
