#include "server/internal/shared_config.h"

#include "core/text.h"
#include "store/sql.h"

namespace infera::server {

SharedConfigStore::SharedConfigStore(std::unique_ptr<store::SqlDb> db) : db_(std::move(db)) {}
SharedConfigStore::~SharedConfigStore() = default;

Result<std::unique_ptr<SharedConfigStore>> SharedConfigStore::open(const std::string& url) {
  auto db = store::SqlDb::open(url);
  if (!db.ok()) return db.status().withContext("config_store: shared: " + redactUrl(url));
  INFERA_RETURN_IF_ERROR((*db)->execScript(R"(
CREATE TABLE IF NOT EXISTS infera_config (
  generation BIGINT PRIMARY KEY,
  yaml TEXT NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  created_ms BIGINT NOT NULL
))"));
  return std::unique_ptr<SharedConfigStore>(new SharedConfigStore(std::move(*db)));
}

namespace {

ConfigGeneration rowOf(const store::SqlResult& r, size_t i, bool with_yaml) {
  ConfigGeneration g;
  g.generation = r.integer(i, 0);
  g.actor = r.text(i, 1);
  g.action = r.text(i, 2);
  g.created_ms = r.integer(i, 3);
  if (with_yaml) g.yaml = r.text(i, 4);
  return g;
}

}  // namespace

Result<std::optional<ConfigGeneration>> SharedConfigStore::newest() {
  std::lock_guard<std::mutex> lock(mu_);
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec("SELECT generation, actor, action, created_ms, yaml FROM infera_config "
                        "ORDER BY generation DESC LIMIT 1"));
  if (r.rows.empty()) return std::optional<ConfigGeneration>();
  return std::optional<ConfigGeneration>(rowOf(r, 0, true));
}

Result<int64_t> SharedConfigStore::newestGeneration() {
  std::lock_guard<std::mutex> lock(mu_);
  INFERA_ASSIGN_OR_RETURN(auto r, db_->exec("SELECT MAX(generation) FROM infera_config"));
  return r.rows.empty() ? 0 : r.integer(0, 0, 0);
}

Result<std::optional<ConfigGeneration>> SharedConfigStore::get(int64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec("SELECT generation, actor, action, created_ms, yaml FROM infera_config "
                        "WHERE generation = ?1",
                        {store::SqlValue(generation)}));
  if (r.rows.empty()) return std::optional<ConfigGeneration>();
  return std::optional<ConfigGeneration>(rowOf(r, 0, true));
}

Status SharedConfigStore::insert(const ConfigGeneration& g) {
  std::lock_guard<std::mutex> lock(mu_);
  // The primary key decides between two writers of the same generation; the check that it is the
  // next one keeps a stale writer from inserting past a generation it never saw.
  INFERA_RETURN_IF_ERROR(db_->begin());
  auto top = db_->exec("SELECT MAX(generation) FROM infera_config");
  if (!top.ok()) {
    (void)db_->rollback();
    return top.status();
  }
  const int64_t newest = top->rows.empty() ? 0 : top->integer(0, 0, 0);
  if (g.generation != newest + 1) {
    (void)db_->rollback();
    return Status::alreadyExists("generation " + std::to_string(newest) + " is the newest, not " +
                                 std::to_string(g.generation - 1));
  }
  auto ins = db_->exec(
      "INSERT INTO infera_config (generation, yaml, actor, action, created_ms) "
      "VALUES (?1, ?2, ?3, ?4, ?5)",
      {store::SqlValue(g.generation), store::SqlValue(g.yaml), store::SqlValue(g.actor),
       store::SqlValue(g.action), store::SqlValue(g.created_ms)});
  if (!ins.ok()) {
    (void)db_->rollback();
    return ins.status();
  }
  return db_->commit();
}

Result<std::vector<ConfigGeneration>> SharedConfigStore::history(int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  INFERA_ASSIGN_OR_RETURN(
      auto r, db_->exec("SELECT generation, actor, action, created_ms FROM infera_config "
                        "ORDER BY generation DESC LIMIT ?1",
                        {store::SqlValue(static_cast<int64_t>(limit))}));
  std::vector<ConfigGeneration> out;
  for (size_t i = 0; i < r.rows.size(); ++i) out.push_back(rowOf(r, i, false));
  return out;
}

}  // namespace infera::server
