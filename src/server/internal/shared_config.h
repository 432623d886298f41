#pragma once
// The config kept in the shared store (`config_store: shared`): every version of the file's text
// as a generation in table infera_config (governance.store: PostgreSQL for replicas on several
// hosts, SQLite for several processes on one), the file being only the bootstrap of generation 1.
// An edit inserts generation newest + 1 (two replicas inserting the same one: the second is
// refused, kAlreadyExists — the generation check across replicas); each replica polls for a newer
// generation and applies it by the reload path. Rollback inserts an older generation's text anew.
//
// Thread-safe (one connection behind a mutex): the poller and the admin loop share it.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace infera::store {
class SqlDb;
}

namespace infera::server {

struct ConfigGeneration {
  int64_t generation = 0;
  std::string yaml;  // the whole config file's text
  std::string actor;
  std::string action;  // "bootstrap", "apply", "rollback to N"
  int64_t created_ms = 0;
};

class SharedConfigStore {
 public:
  static Result<std::unique_ptr<SharedConfigStore>> open(const std::string& url);
  ~SharedConfigStore();

  // The newest generation (nullopt: none yet).
  Result<std::optional<ConfigGeneration>> newest();
  // Only the newest generation's number (0: none): the poll's cheap query.
  Result<int64_t> newestGeneration();
  Result<std::optional<ConfigGeneration>> get(int64_t generation);
  // Inserts `g` (its generation must be the next): kAlreadyExists when another writer took it.
  Status insert(const ConfigGeneration& g);
  // The newest `limit` generations, newest first, without their text.
  Result<std::vector<ConfigGeneration>> history(int limit);

 private:
  explicit SharedConfigStore(std::unique_ptr<store::SqlDb> db);
  std::mutex mu_;
  std::unique_ptr<store::SqlDb> db_;
};

}  // namespace infera::server
