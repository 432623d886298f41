#pragma once
// The platform's data directory ("home") that `infera serve` without -c runs from: the copy of
// examples/platform.yaml it serves (and the console edits), the feature repository beside it, the
// stores and the admin token. The CLI reads the admin token there when none is given.
//
//   home  = --data-dir, else $INFERA_HOME, else $XDG_DATA_HOME/infera, else ~/.local/share/infera

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

namespace infera::cli {

// The home directory: `flag` when set, else as above.
std::string platformHome(const std::string& flag = "");

struct HomeOptions {
  std::optional<uint16_t> port;        // the data port written into the copy (default 8080)
  std::optional<uint16_t> admin_port;  // the admin port (default 9090)
  bool force = false;                  // write the copy even when one exists (its .bak kept)
};

// Writes <dir>/infera.yaml (examples/platform.yaml with ./infera-data/ pointed at `dir`) and
// <dir>/features/repo.yaml unless the config exists (then nothing is touched, unless `force`).
// Returns the config's path; `created` says whether it was written now.
Result<std::string> initHome(const std::string& dir, const HomeOptions& options, bool* created);

// The admin token for calls to `admin_url` when none was given: the home's admin-token file, read
// only when the URL is a loopback one (a token of this machine is never sent elsewhere); "" if
// there is none.
std::string localAdminToken(const std::string& admin_url);

}  // namespace infera::cli
