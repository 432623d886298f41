#pragma once
// One behaviour suite for every SqlDb back end: sql_behaviour.cc holds the TEST_Ps, and each back
// end's test binary instantiates them with a SqlBackend that hands out fresh, empty databases.

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "store/sql.h"

namespace infera::store {

struct SqlBackend {
  std::string name;
  // The URL of a new, empty database on every call; "" (after saying why on stderr) on failure.
  std::function<std::string()> fresh_database;
};

inline std::string backendName(const ::testing::TestParamInfo<SqlBackend>& info) {
  return info.param.name;
}
// How gtest (and so ctest's test names) shows the parameter.
inline void PrintTo(const SqlBackend& backend, std::ostream* os) { *os << backend.name; }

class SqlBehaviourTest : public ::testing::TestWithParam<SqlBackend> {
 protected:
  void SetUp() override {
    url_ = GetParam().fresh_database();
    ASSERT_FALSE(url_.empty()) << "the " << GetParam().name
                               << " back end could not provide a database";
    db_ = open();
    ASSERT_NE(db_, nullptr);
  }
  std::unique_ptr<SqlDb> open() {
    auto db = SqlDb::open(url_);
    EXPECT_TRUE(db.ok()) << db.status().toString();
    return db.ok() ? std::move(*db) : nullptr;
  }
  int64_t count(SqlDb& db, const std::string& table) {
    auto r = db.exec("SELECT COUNT(*) FROM " + table);
    EXPECT_TRUE(r.ok()) << r.status().toString();
    return r.ok() ? r->integer(0, 0, -1) : -1;
  }

  std::string url_;
  std::unique_ptr<SqlDb> db_;
};

}  // namespace infera::store
