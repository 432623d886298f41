#include "cli/admin_client.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "cli/home.h"
#include "core/text.h"
#include "net/client.h"

namespace infera::cli {

using nlohmann::json;

AdminOptions adminOptionsFromEnv() {
  AdminOptions o;
  o.url = envOr("INFERA_ADMIN_URL", "http://127.0.0.1:9090");
  o.token = envOr("INFERA_ADMIN_TOKEN", "");
  return o;
}

void addAdminOptions(CLI::App* c, AdminOptions& o, const char* actor_help) {
  c->add_option("--admin-url", o.url, "Admin API base URL (env INFERA_ADMIN_URL)");
  c->add_option("--admin-token", o.token, "Admin token (env INFERA_ADMIN_TOKEN)");
  c->add_option("--actor", o.actor, actor_help);
  c->add_flag("--json", o.raw, "Print the API's JSON");
}

std::string adminToken(const AdminOptions& o) {
  return o.token.empty() ? localAdminToken(o.url) : o.token;
}

std::vector<net::HttpHeader> adminHeaders(const AdminOptions& o, bool json_body) {
  std::vector<net::HttpHeader> h;
  const std::string token = adminToken(o);
  if (!token.empty()) h.push_back({"authorization", "Bearer " + token});
  if (!o.actor.empty()) h.push_back({"x-infera-actor", o.actor});
  if (json_body) h.push_back({"content-type", "application/json"});
  return h;
}

std::string adminErrorText(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (j.contains("error_code")) return j.value("error_code", "") + ": " + j.value("message", "");
    if (j.contains("error") && j["error"].is_object()) return j["error"].value("message", body);
  }
  return body;
}

json adminCall(const AdminOptions& o, const std::string& method, const std::string& path,
               const json& body, std::chrono::seconds timeout) {
  const std::string payload = body.is_null() ? std::string() : body.dump();
  auto r =
      net::fetchBlocking(o.url + path, method, payload, adminHeaders(o, !body.is_null()), timeout);
  if (!r.ok()) {
    std::fprintf(stderr, "cannot reach the admin API at %s: %s\n", o.url.c_str(),
                 r.status().message().c_str());
    std::exit(1);
  }
  if (r->status >= 400) {
    std::fprintf(stderr, "error %d: %s\n", r->status, adminErrorText(r->body).c_str());
    std::exit(1);
  }
  json j = json::parse(r->body.empty() ? "{}" : r->body, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "the admin API answered something that is not JSON\n");
    std::exit(1);
  }
  return j;
}

std::string timeText(int64_t ms) {
  if (ms <= 0) return "-";
  const time_t s = static_cast<time_t>(ms / 1000);
  struct tm tm {};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

void output(const AdminOptions& o, const json& j, const std::function<void()>& pretty) {
  if (o.raw) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    pretty();
  }
  std::exit(0);
}

}  // namespace infera::cli
