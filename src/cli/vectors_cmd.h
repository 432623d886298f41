#pragma once
// `infera vectors ...`: the vector index from the command line, over the data port's Qdrant API
// (create, load, search, stats, list, delete) and the embedding pipeline (embed).

#include <CLI/CLI.hpp>

namespace infera::cli {

// Adds the `vectors` subcommand tree to `app`. Each talks to --url (env INFERA_URL, default
// http://127.0.0.1:8080) with --api-key (env INFERA_API_KEY), prints the result and exits 0, or
// prints the error and exits 1.
void registerVectorsCommands(CLI::App& app);

}  // namespace infera::cli
