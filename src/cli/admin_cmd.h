#pragma once
// `infera teams|keys|usage|audit ...`: clients of the gateway's admin API (governance).

#include <CLI/CLI.hpp>

namespace infera::cli {

// Adds the subcommands to `app`. Each talks to --admin-url (env INFERA_ADMIN_URL, default
// http://127.0.0.1:9090) with --admin-token (env INFERA_ADMIN_TOKEN), prints the result and exits
// 0, or prints the API's error and exits 1.
void registerAdminCommands(CLI::App& app);

}  // namespace infera::cli
