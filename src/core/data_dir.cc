#include "core/data_dir.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

namespace infera {
namespace {

namespace fs = std::filesystem;

bool isDir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

fs::path executableDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

Result<std::string> findDataDir(std::string_view name) {
  const std::string sub(name);
  if (const char* env = std::getenv("INFERA_DATA_DIR"); env != nullptr && *env != '\0') {
    const fs::path p = fs::path(env) / sub;
    if (isDir(p)) return p.string();
    return Status::notFound("INFERA_DATA_DIR=" + std::string(env) + " has no " + sub + "/");
  }
  std::vector<std::string> tried;
  for (fs::path dir = executableDir(); !dir.empty(); dir = dir.parent_path()) {
    for (const fs::path& p : {dir / "data" / sub, dir / "share" / "infera" / "data" / sub}) {
      if (isDir(p)) return p.string();
    }
    tried.push_back(dir.string());
    if (dir == dir.root_path()) break;
  }
#ifdef INFERA_SOURCE_TREE
  const fs::path src = fs::path(INFERA_SOURCE_TREE) / "data" / sub;
  if (isDir(src)) return src.string();
  tried.push_back(src.string());
#endif
  std::string where;
  for (const auto& t : tried) where += (where.empty() ? "" : ", ") + t;
  return Status::notFound("data set " + sub +
                          " not found (looked in data/ and share/infera/data/ "
                          "of " +
                          where + "); pass --data DIR or set INFERA_DATA_DIR");
}

}  // namespace infera
