#pragma once
// `infera models ...`: the model registry over the admin API (its MLflow REST API and
// /admin/registry/...): list, show, create, versions, upload, download, alias, rollback, history,
// bind, experiment, capture, reviews, review, flag, export, shadow.

#include <CLI/CLI.hpp>

namespace infera::cli {

// Each subcommand talks to --admin-url (env INFERA_ADMIN_URL, default http://127.0.0.1:9090) with
// --admin-token (env INFERA_ADMIN_TOKEN), prints the result and exits 0, or prints the API's
// error and exits 1.
void registerModelCommands(CLI::App& app);

}  // namespace infera::cli
