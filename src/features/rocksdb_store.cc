// The embedded online store: one RocksDB under the data directory, one column family per view
// ("v<id>"), the registry in the default one. Newest-event-wins is a merge operator (writes are
// blind Merge()s, so an ingest never reads), and a per-view compaction filter drops rows whose
// event time + ttl + retain_expired has passed.

#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/merge_operator.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <map>
#include <shared_mutex>

#include "features/internal/online_store.h"
#include "features/internal/pool.h"
#include "features/internal/values.h"

namespace infera::features {
namespace {

constexpr const char* kMetaKey = "registry";

int64_t rowTime(const rocksdb::Slice& s) {
  return s.size() >= kRowHeader ? eventTimeOf(std::string_view(s.data(), s.size())) : INT64_MIN;
}

// Keeps the operand (or existing value) with the newest event time; on a tie the later one.
class NewestWins final : public rocksdb::MergeOperator {
 public:
  bool FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const override {
    const rocksdb::Slice* best = in.existing_value;
    int64_t best_ts = best ? rowTime(*best) : INT64_MIN;
    for (const auto& op : in.operand_list) {
      const int64_t t = rowTime(op);
      if (!best || t >= best_ts) {
        best = &op;
        best_ts = t;
      }
    }
    if (best) out->existing_operand = *best;
    return true;
  }
  bool PartialMerge(const rocksdb::Slice&, const rocksdb::Slice& left, const rocksdb::Slice& right,
                    std::string* new_value, rocksdb::Logger*) const override {
    *new_value = rowTime(right) >= rowTime(left) ? right.ToString() : left.ToString();
    return true;
  }
  const char* Name() const override { return "infera.NewestWins"; }
};

// The view's expiry, read by the compaction filters it creates.
class ExpiryFilterFactory final : public rocksdb::CompactionFilterFactory {
 public:
  ExpiryFilterFactory(const Clock& clock, int64_t retain_s) : clock_(clock), retain_s_(retain_s) {}
  void setTtl(int64_t ttl_s) { ttl_s_.store(ttl_s, std::memory_order_relaxed); }

  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context&) override {
    const int64_t ttl = ttl_s_.load(std::memory_order_relaxed);
    if (ttl <= 0) return nullptr;  // unknown (before the registry is loaded) or forever
    return std::make_unique<Filter>(clock_.unixMillis() * 1000 - (ttl + retain_s_) * 1'000'000);
  }
  const char* Name() const override { return "infera.ExpiryFilterFactory"; }

 private:
  class Filter final : public rocksdb::CompactionFilter {
   public:
    explicit Filter(int64_t cutoff_us) : cutoff_us_(cutoff_us) {}
    Decision FilterV2(int, const rocksdb::Slice&, ValueType type, const rocksdb::Slice& value,
                      std::string*, std::string*) const override {
      if (type != ValueType::kValue && type != ValueType::kMergeOperand) return Decision::kKeep;
      return rowTime(value) < cutoff_us_ ? Decision::kRemove : Decision::kKeep;
    }
    const char* Name() const override { return "infera.ExpiryFilter"; }

   private:
    int64_t cutoff_us_;
  };

  const Clock& clock_;
  const int64_t retain_s_;
  std::atomic<int64_t> ttl_s_{0};
};

Status fromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::ok();
  return Status::unavailable("rocksdb " + std::string(what) + ": " + s.ToString());
}

std::string cfName(uint32_t view) { return "v" + std::to_string(view); }

class RocksSession;

class RocksStore final : public OnlineStore {
 public:
  RocksStore(RocksDbOptions options, const Clock& clock)
      : options_(std::move(options)), clock_(clock) {}

  ~RocksStore() override {
    for (auto& [id, cf] : cfs_) db_->DestroyColumnFamilyHandle(cf.handle);
    if (default_) db_->DestroyColumnFamilyHandle(default_);
    if (db_) db_->Close();
  }

  Status open() {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.create_missing_column_families = true;
    o.max_background_jobs = 2;
    rocksdb::BlockBasedTableOptions t;
    t.block_cache = rocksdb::NewLRUCache(options_.block_cache_bytes);
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    t.cache_index_and_filter_blocks = true;
    t.pin_l0_filter_and_index_blocks_in_cache = true;
    // Point lookups: a hash index inside each data block saves the binary search.
    t.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
    table_factory_.reset(rocksdb::NewBlockBasedTableFactory(t));
    o.table_factory = table_factory_;
    base_ = o;
    std::vector<std::string> names;
    const rocksdb::Status ls = rocksdb::DB::ListColumnFamilies(o, options_.path, &names);
    if (!ls.ok()) names = {rocksdb::kDefaultColumnFamilyName};  // a new database
    std::vector<rocksdb::ColumnFamilyDescriptor> descs;
    std::vector<uint32_t> ids;
    for (const auto& n : names) {
      if (n == rocksdb::kDefaultColumnFamilyName) {
        descs.emplace_back(n, rocksdb::ColumnFamilyOptions(o));
        ids.push_back(0);
        continue;
      }
      const uint32_t id = static_cast<uint32_t>(std::stoul(n.substr(1)));
      auto factory = std::make_shared<ExpiryFilterFactory>(clock_, options_.retain_expired_s);
      descs.emplace_back(n, viewOptions(factory));
      factories_[id] = factory;
      ids.push_back(id);
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    INFERA_RETURN_IF_ERROR(fromRocks(rocksdb::DB::Open(o, options_.path, descs, &handles, &db),
                                     "open " + options_.path));
    db_.reset(db);
    for (size_t i = 0; i < handles.size(); ++i) {
      if (ids[i] == 0) {
        default_ = handles[i];
      } else {
        cfs_[ids[i]] = {handles[i], factories_[ids[i]]};
      }
    }
    write_options_.sync = options_.sync_writes;
    write_options_.memtable_insert_hint_per_batch = true;
    return Status::ok();
  }

  Status createView(uint32_t view, int64_t ttl_s) override {
    std::unique_lock lock(mu_);
    auto it = cfs_.find(view);
    if (it != cfs_.end()) {
      it->second.factory->setTtl(ttl_s);
      return Status::ok();
    }
    auto factory = std::make_shared<ExpiryFilterFactory>(clock_, options_.retain_expired_s);
    factory->setTtl(ttl_s);
    rocksdb::ColumnFamilyHandle* h = nullptr;
    INFERA_RETURN_IF_ERROR(
        fromRocks(db_->CreateColumnFamily(viewOptions(factory), cfName(view), &h), "create view"));
    cfs_[view] = {h, factory};
    return Status::ok();
  }

  Status dropView(uint32_t view) override {
    std::unique_lock lock(mu_);
    auto it = cfs_.find(view);
    if (it == cfs_.end()) return Status::ok();
    const rocksdb::Status s = db_->DropColumnFamily(it->second.handle);
    db_->DestroyColumnFamilyHandle(it->second.handle);
    cfs_.erase(it);
    return fromRocks(s, "drop view");
  }

  std::vector<uint32_t> storedViews() override {
    std::shared_lock lock(mu_);
    std::vector<uint32_t> out;
    for (const auto& [id, cf] : cfs_) out.push_back(id);
    return out;
  }

  Status write(std::vector<RowWrite> rows) override { return apply(rows, true); }
  Status put(std::vector<RowWrite> rows) override { return apply(rows, false); }

  Status read(std::span<const ReadKey> keys, std::vector<std::string>& rows) override {
    rows.assign(keys.size(), std::string());
    std::shared_lock lock(mu_);
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    std::vector<rocksdb::Slice> slices;
    std::vector<size_t> at;
    handles.reserve(keys.size());
    slices.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = cfs_.find(keys[i].view);
      if (it == cfs_.end()) continue;  // a view without storage holds nothing
      handles.push_back(it->second.handle);
      slices.emplace_back(keys[i].key.data(), keys[i].key.size());
      at.push_back(i);
    }
    if (slices.empty()) return Status::ok();
    std::vector<rocksdb::PinnableSlice> values(slices.size());
    std::vector<rocksdb::Status> statuses(slices.size());
    db_->MultiGet(rocksdb::ReadOptions(), slices.size(), handles.data(), slices.data(),
                  values.data(), statuses.data());
    for (size_t j = 0; j < slices.size(); ++j) {
      if (statuses[j].ok()) {
        rows[at[j]].assign(values[j].data(), values[j].size());
      } else if (!statuses[j].IsNotFound()) {
        return fromRocks(statuses[j], "read");
      }
    }
    return Status::ok();
  }

  Result<std::string> loadMeta() override {
    std::string v;
    const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), default_, kMetaKey, &v);
    if (s.IsNotFound()) return std::string();
    INFERA_RETURN_IF_ERROR(fromRocks(s, "read registry"));
    return v;
  }

  Status saveMeta(const std::string& blob) override {
    rocksdb::WriteOptions wo;
    wo.sync = true;  // rare, and what every view's storage depends on
    return fromRocks(db_->Put(wo, default_, kMetaKey, blob), "save registry");
  }

  std::unique_ptr<Session> session(net::asio::io_context& ctx, WorkerPool& pool) override;

  Status compact() override {
    std::shared_lock lock(mu_);
    for (auto& [id, cf] : cfs_) {
      INFERA_RETURN_IF_ERROR(fromRocks(db_->Flush(rocksdb::FlushOptions(), cf.handle), "flush"));
      rocksdb::CompactRangeOptions co;
      co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
      INFERA_RETURN_IF_ERROR(
          fromRocks(db_->CompactRange(co, cf.handle, nullptr, nullptr), "compact"));
    }
    return Status::ok();
  }

  StoreStats stats() override {
    std::shared_lock lock(mu_);
    StoreStats st;
    for (auto& [id, cf] : cfs_) {
      uint64_t v = 0;
      if (db_->GetIntProperty(cf.handle, "rocksdb.estimate-num-keys", &v))
        st.keys += static_cast<int64_t>(v);
      if (db_->GetIntProperty(cf.handle, "rocksdb.live-sst-files-size", &v))
        st.bytes += static_cast<int64_t>(v);
      if (db_->GetIntProperty(cf.handle, "rocksdb.cur-size-all-mem-tables", &v))
        st.bytes += static_cast<int64_t>(v);
    }
    return st;
  }

  std::string_view kind() const override { return "rocksdb"; }

 private:
  struct Cf {
    rocksdb::ColumnFamilyHandle* handle = nullptr;
    std::shared_ptr<ExpiryFilterFactory> factory;
  };

  rocksdb::ColumnFamilyOptions viewOptions(std::shared_ptr<ExpiryFilterFactory> factory) const {
    rocksdb::ColumnFamilyOptions c(base_);
    c.merge_operator = std::make_shared<NewestWins>();
    // Rows of numbers barely compress; decompressing a block on every cache miss costs more.
    c.compression = rocksdb::kNoCompression;
    c.compaction_filter_factory = std::move(factory);
    return c;
  }

  Status apply(const std::vector<RowWrite>& rows, bool merge) {
    // In key order, so that each memtable insert starts from the previous one's position
    // (memtable_insert_hint_per_batch); a stable sort keeps a key's rows in their given order.
    std::vector<const RowWrite*> order;
    order.reserve(rows.size());
    for (const auto& r : rows) order.push_back(&r);
    std::stable_sort(order.begin(), order.end(), [](const RowWrite* a, const RowWrite* b) {
      return a->view != b->view ? a->view < b->view : a->key < b->key;
    });
    size_t bytes = 64;
    for (const auto& r : rows) bytes += r.key.size() + r.row.size() + 16;
    rocksdb::WriteBatch batch(bytes);
    std::shared_lock lock(mu_);
    for (const RowWrite* rp : order) {
      const RowWrite& r = *rp;
      auto it = cfs_.find(r.view);
      if (it == cfs_.end())
        return Status::notFound("feature view storage " + std::to_string(r.view) +
                                " does not exist");
      const rocksdb::Status s = merge ? batch.Merge(it->second.handle, r.key, r.row)
                                      : batch.Put(it->second.handle, r.key, r.row);
      INFERA_RETURN_IF_ERROR(fromRocks(s, "batch"));
    }
    return fromRocks(db_->Write(write_options_, &batch), "write");
  }

  RocksDbOptions options_;
  const Clock& clock_;
  rocksdb::Options base_;
  std::shared_ptr<rocksdb::TableFactory> table_factory_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* default_ = nullptr;
  rocksdb::WriteOptions write_options_;
  std::shared_mutex mu_;  // cfs_: shared by reads and writes, exclusive to create/drop
  std::map<uint32_t, Cf> cfs_;
  std::map<uint32_t, std::shared_ptr<ExpiryFilterFactory>> factories_;
};

// Reads and writes go to the pool (RocksDB may touch disk); the loop only waits for the result.
class RocksSession final : public Session {
 public:
  RocksSession(RocksStore& store, net::asio::io_context& ctx, WorkerPool& pool)
      : store_(store), ctx_(ctx), pool_(pool) {}

  net::Task<Status> read(std::span<const ReadKey> keys, std::vector<std::string>& rows) override {
    // g++ 12 double-destroys temporaries inside co_await expressions: the job and task are named.
    std::function<Status()> job = [this, keys, &rows] { return store_.read(keys, rows); };
    auto task = runOnPoolStatus(pool_, ctx_, std::move(job));
    co_return co_await std::move(task);
  }
  net::Task<Status> write(std::vector<RowWrite> rows) override {
    auto shared = std::make_shared<std::vector<RowWrite>>(std::move(rows));
    std::function<Status()> job = [this, shared] { return store_.write(std::move(*shared)); };
    auto task = runOnPoolStatus(pool_, ctx_, std::move(job));
    co_return co_await std::move(task);
  }

 private:
  RocksStore& store_;
  net::asio::io_context& ctx_;
  WorkerPool& pool_;
};

std::unique_ptr<Session> RocksStore::session(net::asio::io_context& ctx, WorkerPool& pool) {
  return std::make_unique<RocksSession>(*this, ctx, pool);
}

}  // namespace

Result<std::unique_ptr<OnlineStore>> openRocksDbStore(const RocksDbOptions& options,
                                                      const Clock& clock) {
  auto s = std::make_unique<RocksStore>(options, clock);
  INFERA_RETURN_IF_ERROR(s->open());
  return std::unique_ptr<OnlineStore>(std::move(s));
}

}  // namespace infera::features
