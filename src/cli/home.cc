#include "cli/home.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "core/text.h"
#include "server/config.h"

namespace infera::cli {
namespace platform_files {
std::string_view platform_yaml();
std::string_view features_repo_yaml();
}  // namespace platform_files

namespace {

namespace fs = std::filesystem;

Status writeNew(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::internal("cannot write " + tmp);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out.flush()) return Status::internal("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::internal("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return Status::ok();
}

// `line` with its "port: N" set to `port`.
std::string withPort(std::string line, uint16_t port) {
  const size_t at = line.find("port: ");
  if (at == std::string::npos) return line;
  size_t end = at + 6;
  while (end < line.size() && line[end] >= '0' && line[end] <= '9') ++end;
  return line.substr(0, at + 6) + std::to_string(port) + line.substr(end);
}

}  // namespace

std::string platformHome(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const std::string h = envOr("INFERA_HOME", ""); !h.empty()) return h;
  if (const std::string x = envOr("XDG_DATA_HOME", ""); !x.empty()) return x + "/infera";
  const std::string home = envOr("HOME", "");
  return (home.empty() ? std::string(".") : home) + "/.local/share/infera";
}

Result<std::string> initHome(const std::string& dir_in, const HomeOptions& options, bool* created) {
  std::error_code ec;
  const std::string dir = fs::absolute(dir_in, ec).lexically_normal().string();
  if (ec) return Status::invalidArgument("data directory " + dir_in + ": " + ec.message());
  const std::string config = dir + "/infera.yaml";
  *created = false;
  if (fs::exists(config, ec) && !options.force) return config;
  fs::create_directories(dir + "/features", ec);
  if (ec) return Status::failedPrecondition("cannot create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);  // stores and the admin token: this user's
  std::istringstream in{std::string(platform_files::platform_yaml())};
  std::string text, line;
  // The template's state paths are single-quoted YAML strings: the directory goes in with its
  // quotes doubled, so any path reads back as itself.
  const std::string from = "./infera-data/";
  std::string to;
  for (char c : dir + "/") {
    to += c;
    if (c == '\'') to += '\'';
  }
  while (std::getline(in, line)) {
    for (size_t at = line.find(from); at != std::string::npos; at = line.find(from, at)) {
      line.replace(at, from.size(), to);
      at += to.size();
    }
    if (line.rfind("listen:", 0) == 0 && options.port) line = withPort(line, *options.port);
    if (line.rfind("admin:", 0) == 0 && options.admin_port) {
      line = withPort(line, *options.admin_port);
    }
    text += line + "\n";
  }
  if (fs::exists(config, ec)) {
    fs::copy_file(config, config + ".bak", fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::internal("cannot back up " + config + ": " + ec.message());
  }
  INFERA_RETURN_IF_ERROR(
      writeNew(dir + "/features/repo.yaml", platform_files::features_repo_yaml()));
  // Read back as `serve` will: a directory the config cannot hold is refused now, not at start.
  if (auto cfg = server::loadConfigText(text, config); !cfg.ok()) {
    return cfg.status().withContext("the platform config for data directory " + dir);
  }
  INFERA_RETURN_IF_ERROR(writeNew(config, text));
  *created = true;
  return config;
}

std::string localAdminToken(const std::string& admin_url) {
  std::string_view u = admin_url;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (u.substr(0, scheme.size()) == scheme) u.remove_prefix(scheme.size());
  }
  const std::string_view host =
      u.substr(0, u.substr(0, 1) == "[" ? u.find(']') + 1 : u.find_first_of(":/?#"));
  if (host != "127.0.0.1" && host != "localhost" && host != "[::1]") return "";
  std::ifstream in(platformHome() + "/admin-token");
  std::string token;
  if (!in || !std::getline(in, token)) return "";
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  return token;
}

}  // namespace infera::cli
