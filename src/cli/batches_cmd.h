#pragma once
// `infera batches ...`: batch inference from the command line, over the data port's OpenAI Files
// and Batches APIs with an API key, as the openai SDK would (create, list, show, cancel, output).

#include <CLI/CLI.hpp>

namespace infera::cli {

// Adds the `batches` subcommand tree to `app`. Each talks to --url (env INFERA_URL, default
// http://127.0.0.1:8080) with --api-key (env INFERA_API_KEY), prints the result and exits 0, or
// prints the error and exits 1.
void registerBatchesCommands(CLI::App& app);

}  // namespace infera::cli
