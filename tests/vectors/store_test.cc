#include "vectors/internal/store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "core/utf8.h"

namespace infera::vectors {
namespace {

// Waits for a writer thread's answer.
class Answer {
 public:
  std::function<void(Status)> callback() {
    return [this](Status s) {
      std::lock_guard lock(mu_);
      status_ = std::move(s);
      done_ = true;
      cv_.notify_all();
    };
  }
  Status wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    done_ = false;
    return status_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/infera-vectors-store-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    open();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void open() {
    store_.reset();
    StoreOptions o;
    o.data_dir = dir_;
    o.fsync = false;
    auto s = Store::open(o);
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(*s);
  }
  Status create(const std::string& name, const std::string& owner) {
    CollectionParams p;
    p.dim = 2;
    Answer a;
    const Status queued = store_->create(name, p, owner, a.callback());
    return queued.isOk() ? a.wait() : queued;
  }

  // Rewrites the name config.json of collection `name` holds, byte for byte.
  void renameInConfig(const std::string& name, const std::string& stored) {
    const std::string file = dir_ + "/collections/" + encodeDirName(name) + "/config.json";
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    const std::string from = "\"name\":\"" + name + "\"";
    const size_t at = s.find(from);
    ASSERT_NE(at, std::string::npos) << s;
    s.replace(at, from.size(), "\"name\":\"" + stored + "\"");
    std::ofstream(file, std::ios::trunc) << s;
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, AJobThatThrowsIsAnsweredInternalAndTheWriterKeepsWorking) {
  Answer a;
  ASSERT_TRUE(
      store_
          ->runOnWriter(
              "c", []() -> Status { throw std::runtime_error("a bug in a job"); }, a.callback())
          .isOk());
  const Status s = a.wait();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("a bug in a job"), std::string::npos) << s.message();
  // The same writer thread (one thread here) still runs what comes next.
  EXPECT_TRUE(create("c", "").isOk());
  ASSERT_NE(store_->find("c"), nullptr);
}

TEST_F(StoreTest, OwnerIsStoredWithTheCollectionAndCreateNeverReplaces) {
  ASSERT_TRUE(create("mine", "team-a").isOk());
  ASSERT_TRUE(create("shared", "").isOk());
  EXPECT_EQ(create("mine", "team-b").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->find("mine")->owner, "team-a");
  open();
  ASSERT_NE(store_->find("mine"), nullptr);
  EXPECT_EQ(store_->find("mine")->owner, "team-a");
  ASSERT_NE(store_->find("shared"), nullptr);
  EXPECT_EQ(store_->find("shared")->owner, "");  // config.json without "owner": shared
}

TEST_F(StoreTest, DropLeavesACollectionReCreatedSinceItWasLookedUp) {
  ASSERT_TRUE(create("c", "team-a").isOk());
  const auto old_entry = store_->find("c");
  Answer a;
  ASSERT_TRUE(store_->drop(old_entry, a.callback()).isOk());
  EXPECT_TRUE(a.wait().isOk());
  ASSERT_TRUE(create("c", "team-b").isOk());
  ASSERT_TRUE(store_->drop(old_entry, a.callback()).isOk());
  EXPECT_EQ(a.wait().code(), StatusCode::kNotFound);
  ASSERT_NE(store_->find("c"), nullptr);
  EXPECT_EQ(store_->find("c")->owner, "team-b");
}

TEST_F(StoreTest, CreateRefusesANameThatIsNotUtf8) {
  EXPECT_EQ(create("x\xFF", "").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->names().empty());
}

TEST_F(StoreTest, NamesStoredBeforeTheDoorLoadUnderUniqueValidSpellings) {
  // What older versions left: config.json names with a raw 0xFF byte, or with U+FFFD where the
  // writer replaced one (two such collections then read the same name).
  ASSERT_TRUE(create("a", "").isOk());
  ASSERT_TRUE(create("b", "").isOk());
  ASSERT_TRUE(create("c", "").isOk());
  store_.reset();
  renameInConfig("a", "x\xFF");
  renameInConfig("b", "x\xEF\xBF\xBD");
  renameInConfig("c", "x\xEF\xBF\xBD");
  open();
  const auto names = store_->names();
  ASSERT_EQ(names.size(), 3u);
  for (const auto& n : names) EXPECT_TRUE(validUtf8(n)) << n;
  ASSERT_NE(store_->find("x\xEF\xBF\xBD"), nullptr);
  ASSERT_NE(store_->find("x\xEF\xBF\xBD~"), nullptr);
  ASSERT_NE(store_->find("x\xEF\xBF\xBD~~"), nullptr);
  // The same spellings at every start, and each can be dropped under its own.
  const std::string dir = store_->find("x\xEF\xBF\xBD~")->dir;
  open();
  ASSERT_NE(store_->find("x\xEF\xBF\xBD~"), nullptr);
  EXPECT_EQ(store_->find("x\xEF\xBF\xBD~")->dir, dir);
  Answer a;
  ASSERT_TRUE(store_->drop(store_->find("x\xEF\xBF\xBD~"), a.callback()).isOk());
  EXPECT_TRUE(a.wait().isOk());
  open();
  EXPECT_EQ(store_->names().size(), 2u);
}

// A legacy collection whose stored name reads like a newer one's takes that name at start, and the
// newer one is served as "<name>~" from its own directory. Once the legacy one is dropped, creating
// the name again must not clear the directory the "~" collection lives in.
TEST_F(StoreTest, CreateNeverClearsTheDirectoryOfACollectionServedUnderAnotherName) {
  const std::string name = "x\xEF\xBF\xBD";
  ASSERT_TRUE(create(name, "").isOk());
  ASSERT_TRUE(create("a", "").isOk());  // "a" sorts first: it takes the name at the next start
  store_.reset();
  renameInConfig("a", name);
  open();
  ASSERT_NE(store_->find(name), nullptr);
  ASSERT_NE(store_->find(name + "~"), nullptr);
  const std::string kept = store_->find(name + "~")->dir;
  ASSERT_EQ(kept, dir_ + "/collections/" + encodeDirName(name));
  Answer a;
  ASSERT_TRUE(store_->drop(store_->find(name), a.callback()).isOk());
  ASSERT_TRUE(a.wait().isOk());
  const Status again = create(name, "");
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again.message();
  EXPECT_TRUE(std::filesystem::exists(kept + "/config.json"));
  // At the next start, alone with its name again, it is served under it.
  open();
  ASSERT_NE(store_->find(name), nullptr);
  EXPECT_EQ(store_->find(name)->dir, kept);
}

}  // namespace
}  // namespace infera::vectors
