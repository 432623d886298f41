#pragma once
// `infera features plan|apply|registry|ingest`: clients of the feature store's admin API.

#include <CLI/CLI.hpp>

namespace infera::cli {

// Adds the `features` subcommand tree to `app`. Each talks to --admin-url (env INFERA_ADMIN_URL,
// default http://127.0.0.1:9090) with --admin-token (env INFERA_ADMIN_TOKEN) and exits 0, or prints
// the API's error and exits 1 (plan: also 1 when a change would break a served feature).
void registerFeaturesCommands(CLI::App& app);

}  // namespace infera::cli
