#include "core/config.h"
#include "registry/internal/store.h"
#include "registry/registry.h"

namespace infera::registry {

void readRegistryConfig(ConfigReader& r, RegistryConfig& c) {
  c.enabled = true;
  r.optional("store", c.store);
  r.optional("data_dir", c.data_dir);
  r.optional("artifact_dir", c.artifact_dir);
  r.optional("max_artifact_bytes", c.max_artifact_bytes, 1, 1LL << 40);
  r.optional("threads", c.threads, 1, 64);
  r.optional("max_queued", c.max_queued, 1, 1'000'000);
  r.optional("sync_interval_ms", c.sync_interval_ms, 10, 60'000);
  r.optional("default_alias", c.default_alias);
  if (r.present("default_alias")) {
    const Status s = validateAlias(c.default_alias);
    if (!s.isOk()) r.error("default_alias", s.message());
  }
  r.object("capture", [&](ConfigReader& cr) {
    cr.optional("max_body_bytes", c.capture_max_body_bytes, 256, 16 << 20);
    cr.optional("max_rows_per_version", c.capture_max_rows, 1, 100'000'000);
  });
  r.object("shadow",
           [&](ConfigReader& sr) { sr.optional("max_rows", c.shadow_max_rows, 1, 100'000'000); });
  r.forEach("bindings", [&](ConfigReader& b, size_t) {
    BindingConfig bc;
    bc.line = b.line();
    b.required("model", bc.model);
    std::string version, alias;
    b.optional("version", version);
    b.optional("alias", alias);
    if (version.empty() == alias.empty()) {
      b.error("", "needs exactly one of 'version' or 'alias'");
    } else if (!version.empty()) {
      if (!parseVersion(version).ok())
        b.error("version", "must be a version number, got '" + version + "'");
      bc.ref = version;
    } else {
      const Status s = validateAlias(alias);
      if (!s.isOk()) b.error("alias", s.message());
      bc.ref = "@" + alias;
    }
    b.required("deployments", bc.deployments);
    if (bc.deployments.empty()) b.error("deployments", "must name at least one deployment");
    c.bindings.push_back(std::move(bc));
  });
}

std::vector<std::string> restartNeeded(const RegistryConfig& a, const RegistryConfig& b) {
  std::vector<std::string> out;
  if (a.enabled != b.enabled || a.store != b.store || a.data_dir != b.data_dir ||
      a.artifact_dir != b.artifact_dir || a.max_artifact_bytes != b.max_artifact_bytes ||
      a.threads != b.threads || a.max_queued != b.max_queued ||
      a.sync_interval_ms != b.sync_interval_ms || a.default_alias != b.default_alias ||
      a.capture_max_body_bytes != b.capture_max_body_bytes ||
      a.capture_max_rows != b.capture_max_rows || a.shadow_max_rows != b.shadow_max_rows) {
    out.push_back("registry (everything but bindings)");
  }
  return out;
}

}  // namespace infera::registry
