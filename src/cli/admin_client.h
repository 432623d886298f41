#pragma once
// What the CLI's admin commands share (infera teams|keys|users|usage|..., infera models ...): the
// admin URL and token (flags or INFERA_ADMIN_URL / INFERA_ADMIN_TOKEN), one JSON request that exits
// 1 with the API's message on failure, and the printing helpers.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "net/http.h"

namespace infera::cli {

struct AdminOptions {
  std::string url;
  std::string token;
  std::string actor;  // x-infera-actor: who made the change (audit log, alias history)
  bool raw = false;   // --json: print the API's JSON
};

// URL and token from the environment (INFERA_ADMIN_URL, default http://127.0.0.1:9090;
// INFERA_ADMIN_TOKEN).
AdminOptions adminOptionsFromEnv();
// --admin-url, --admin-token, --actor (with `actor_help`) and --json on `c`.
void addAdminOptions(CLI::App* c, AdminOptions& o, const char* actor_help);

// The token to send: --admin-token / INFERA_ADMIN_TOKEN, else the data directory's (cli/home.h:
// only to a loopback admin URL).
std::string adminToken(const AdminOptions& o);
std::vector<net::HttpHeader> adminHeaders(const AdminOptions& o, bool json_body);
// The message of an error body: MLflow's {"error_code","message"} as "CODE: message", Infera's
// {"error":{"message"}} as the message, anything else as it is.
std::string adminErrorText(const std::string& body);
// One admin request. An empty body answered is {}. Exits 1 (with the reason on stderr) when the API
// cannot be reached, answers >= 400 or answers something that is not JSON.
nlohmann::json adminCall(const AdminOptions& o, const std::string& method, const std::string& path,
                         const nlohmann::json& body = nullptr,
                         std::chrono::seconds timeout = std::chrono::seconds(60));

// Unix milliseconds as "YYYY-MM-DD HH:MM:SSZ" ("-" for 0 or less).
std::string timeText(int64_t ms);
// --json: the JSON; else `pretty()`. Exits 0.
[[noreturn]] void output(const AdminOptions& o, const nlohmann::json& j,
                         const std::function<void()>& pretty);

}  // namespace infera::cli
