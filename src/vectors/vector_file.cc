// Vector files: TEXMEX .fvecs/.ivecs/.bvecs (per record a little-endian int32 dimension, then that
// many float32 / int32 / uint8 components), TSV (numbers separated by tabs, spaces or commas, one
// vector per line, optionally an id column) and JSON lines ({"id","vector","payload"}).
#include <sys/stat.h>

#include <charconv>
#include <cmath>
#include <cstring>

#include "vectors/ingest.h"
#include "vectors/internal/files.h"
#include "vectors/internal/json.h"
#include "vectors/internal/point_id.h"

namespace infera::vectors {

LineReader::~LineReader() {
  if (f_) std::fclose(f_);
  std::free(buf_);
}

uint64_t fnv1a(const char* p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; ++i) h = (h ^ uint8_t(p[i])) * 1099511628211ull;
  return h;
}

Status LineReader::open(const std::string& path, uint64_t offset, uint64_t first_line,
                        uint64_t prefix_hash) {
  hash_ = offset == 0 ? fnv1a(nullptr, 0) : prefix_hash;
  path_ = path;
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) return Status::notFound("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fileno(f_), &st) == 0) size_ = uint64_t(st.st_size);
  if (offset > 0 && fseeko(f_, off_t(offset), SEEK_SET) != 0) {
    return Status::internal("cannot seek in " + path + ": " + std::strerror(errno));
  }
  offset_ = offset;
  line_ = first_line - 1;
  return Status::ok();
}

bool LineReader::next(std::string_view& line) {
  const ssize_t n = getline(&buf_, &cap_, f_);
  if (n < 0) return false;
  offset_ += uint64_t(n);
  hash_ = fnv1a(buf_, size_t(n), hash_);
  ++line_;
  size_t len = size_t(n);
  if (len > 0 && buf_[len - 1] == '\n') --len;
  if (len > 0 && buf_[len - 1] == '\r') --len;
  line = std::string_view(buf_, len);
  return true;
}

Status lineError(const std::string& path, uint64_t line, size_t column,
                 const std::string& message) {
  // Appended piece by piece: g++ 12 -O3 warns falsely (-Wrestrict) on "literal" + std::string&&.
  std::string s = path;
  s += ':';
  s += std::to_string(line);
  if (column > 0) {
    s += ':';
    s += std::to_string(column);
  }
  s += ": ";
  s += message;
  return Status::invalidArgument(std::move(s));
}

bool parseFileFormat(const std::string& name, FileFormat& out) {
  if (name == "auto")
    out = FileFormat::kAuto;
  else if (name == "fvecs")
    out = FileFormat::kFvecs;
  else if (name == "ivecs")
    out = FileFormat::kIvecs;
  else if (name == "bvecs")
    out = FileFormat::kBvecs;
  else if (name == "tsv")
    out = FileFormat::kTsv;
  else if (name == "jsonl" || name == "json" || name == "ndjson")
    out = FileFormat::kJsonl;
  else
    return false;
  return true;
}

FileFormat formatOf(const std::string& path) {
  auto ends = [&](std::string_view ext) {
    return path.size() >= ext.size() && path.ends_with(ext);
  };
  if (ends(".fvecs")) return FileFormat::kFvecs;
  if (ends(".ivecs")) return FileFormat::kIvecs;
  if (ends(".bvecs")) return FileFormat::kBvecs;
  if (ends(".jsonl") || ends(".ndjson") || ends(".json")) return FileFormat::kJsonl;
  return FileFormat::kTsv;
}

namespace {

std::string quoted(std::string_view s) {
  std::string out = "'";
  out += s.substr(0, 40);
  out += s.size() > 40 ? "...'" : "'";
  return out;
}

// Where `"key"` starts in a JSON line (1-based), or 1.
size_t keyColumn(std::string_view line, std::string_view key) {
  std::string quoted_key = "\"";
  quoted_key += key;
  quoted_key += '"';
  const size_t at = line.find(quoted_key);
  return at == std::string_view::npos ? 1 : at + 1;
}

// An id from text: an unsigned integer, or a UUID.
std::optional<nlohmann::json> idFromText(std::string_view s) {
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec == std::errc() && end == s.data() + s.size()) return nlohmann::json(n);
  PointId p;
  if (parseUuid(s, p)) return nlohmann::json(p.toString());
  return std::nullopt;
}

class BinaryReader final : public VectorFileReader {
 public:
  BinaryReader(FileFormat f, ReadOptions o) : format_(f), options_(o), dim_(o.dim) {}
  ~BinaryReader() override {
    if (f_) std::fclose(f_);
  }
  Status open(const std::string& path) {
    path_ = path;
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) return Status::notFound("cannot open " + path + ": " + std::strerror(errno));
    struct stat st {};
    if (fstat(fileno(f_), &st) == 0) size_ = uint64_t(st.st_size);
    return Status::ok();
  }

  Result<bool> next(FilePoint& out) override {
    const uint64_t at = offset_;
    int32_t d = 0;
    const size_t got = std::fread(&d, 1, 4, f_);
    if (got == 0) return false;
    ++record_;
    if (got < 4) return error(at, "truncated record (the file ends inside its dimension)");
    offset_ += 4;
    if (d <= 0 || d > 65'536)
      return error(at, "dimension " + std::to_string(d) + " is not in [1, 65536]");
    if (dim_ == 0) dim_ = size_t(d);
    if (size_t(d) != dim_) {
      return error(
          at, "dimension " + std::to_string(d) + ", the collection's is " + std::to_string(dim_));
    }
    const size_t width = format_ == FileFormat::kBvecs ? 1 : 4;
    raw_.resize(size_t(d) * width);
    if (std::fread(raw_.data(), 1, raw_.size(), f_) != raw_.size()) {
      return error(at, "truncated record (" + std::to_string(d) + " components announced)");
    }
    offset_ += raw_.size();
    out.vector.resize(size_t(d));
    for (size_t i = 0; i < size_t(d); ++i) {
      if (format_ == FileFormat::kFvecs) {
        float x;
        std::memcpy(&x, &raw_[i * 4], 4);
        if (!std::isfinite(x))
          return error(at, "component " + std::to_string(i + 1) + " is not a finite number");
        out.vector[i] = x;
      } else if (format_ == FileFormat::kIvecs) {
        int32_t x;
        std::memcpy(&x, &raw_[i * 4], 4);
        out.vector[i] = float(x);
      } else {
        out.vector[i] = float(uint8_t(raw_[i]));
      }
    }
    out.id = options_.first_id + record_ - 1;
    out.payload = nullptr;
    out.line = record_;
    return true;
  }
  uint64_t offset() const override { return offset_; }
  uint64_t size() const override { return size_; }
  size_t dim() const override { return dim_; }

 private:
  Status error(uint64_t at, const std::string& m) const {
    return Status::invalidArgument(path_ + ": record " + std::to_string(record_) + " (byte " +
                                   std::to_string(at) + "): " + m);
  }
  FileFormat format_;
  ReadOptions options_;
  size_t dim_;
  std::FILE* f_ = nullptr;
  std::string path_;
  std::vector<char> raw_;
  uint64_t record_ = 0, offset_ = 0, size_ = 0;
};

class TsvReader final : public VectorFileReader {
 public:
  explicit TsvReader(ReadOptions o) : options_(o), dim_(o.dim) {}
  Status open(const std::string& path) { return lines_.open(path); }

  Result<bool> next(FilePoint& out) override {
    std::string_view line;
    for (;;) {
      if (!lines_.next(line)) return false;
      const size_t first = line.find_first_not_of(" \t,");
      if (first != std::string_view::npos && line[first] != '#')
        break;  // blank lines and # comments
    }
    fields_.clear();
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == '\t' || line[i] == ' ' || line[i] == ',')) ++i;
      if (i >= line.size()) break;
      size_t j = i;
      while (j < line.size() && line[j] != '\t' && line[j] != ' ' && line[j] != ',') ++j;
      fields_.push_back({i, line.substr(i, j - i)});
      i = j;
    }
    const bool has_id = options_.id_column != ReadOptions::IdColumn::kNone;
    if (dim_ == 0) {
      dim_ = fields_.size() - (has_id ? 1 : 0);
      if (dim_ == 0) return err(1, "an id column and no vector");
    }
    const size_t want = dim_ + (has_id ? 1 : 0);
    if (fields_.size() < want) {
      return err(line.size() + 1, std::to_string(fields_.size()) + " columns, want " +
                                      std::to_string(want) + " (the dimension is " +
                                      std::to_string(dim_) + (has_id ? ", plus the id)" : ")"));
    }
    if (fields_.size() > want && !options_.ignore_extra_columns) {
      return err(fields_[want].first + 1,
                 "column " + std::to_string(want + 1) + ": more columns than the dimension " +
                     std::to_string(dim_) + (has_id ? " plus the id" : "") +
                     " (an id column: --id-column first|last; or --ignore-extra-columns)");
    }
    size_t v0 = 0;
    size_t id_field = 0;
    if (options_.id_column == ReadOptions::IdColumn::kFirst) {
      id_field = 0;
      v0 = 1;
    } else if (options_.id_column == ReadOptions::IdColumn::kLast) {
      id_field =
          fields_.size() > want && options_.ignore_extra_columns ? want - 1 : fields_.size() - 1;
    }
    out.vector.resize(dim_);
    for (size_t i = 0; i < dim_; ++i) {
      const auto& [col, text] = fields_[v0 + i];
      float x = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
      if (ec == std::errc::result_out_of_range)
        return err(col + 1, "column " + std::to_string(v0 + i + 1) + ": " + quoted(text) +
                                " is out of float range");
      if (ec != std::errc() || end != text.data() + text.size()) {
        return err(col + 1, "column " + std::to_string(v0 + i + 1) + ": " + quoted(text) +
                                " is not a number");
      }
      if (!std::isfinite(x))
        return err(col + 1, "column " + std::to_string(v0 + i + 1) + ": " + quoted(text) +
                                " is not a finite number");
      out.vector[i] = x;
    }
    if (has_id) {
      const auto& [col, text] = fields_[id_field];
      auto id = idFromText(text);
      if (!id)
        return err(col + 1, "column " + std::to_string(id_field + 1) + ": " + quoted(text) +
                                " is not a point id (an unsigned integer or a UUID)");
      out.id = std::move(*id);
    } else {
      out.id = options_.first_id + rows_;
    }
    ++rows_;
    out.payload = nullptr;
    out.line = lines_.line();
    return true;
  }
  uint64_t offset() const override { return lines_.offset(); }
  uint64_t size() const override { return lines_.size(); }
  size_t dim() const override { return dim_; }

 private:
  Status err(size_t col, const std::string& m) const {
    return lineError(lines_.path(), lines_.line(), col, m);
  }
  ReadOptions options_;
  size_t dim_;
  LineReader lines_;
  std::vector<std::pair<size_t, std::string_view>> fields_;
  uint64_t rows_ = 0;
};

class JsonlReader final : public VectorFileReader {
 public:
  explicit JsonlReader(ReadOptions o) : dim_(o.dim) {}
  Status open(const std::string& path) { return lines_.open(path); }

  Result<bool> next(FilePoint& out) override {
    std::string_view line;
    for (;;) {
      if (!lines_.next(line)) return false;
      if (line.find_first_not_of(" \t") != std::string_view::npos) break;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      return err(e.byte == 0 ? 1 : e.byte, "not JSON (" + std::string(e.what()) + ")");
    }
    if (!j.is_object())
      return err(1, "a line must be a JSON object {\"id\", \"vector\", \"payload\"}");
    auto col = [&](const char* key) { return keyColumn(line, key); };
    if (!j.contains("id")) return err(1, "missing \"id\"");
    const nlohmann::json& id = j["id"];
    if (id.is_number_unsigned() || (id.is_number_integer() && id.get<int64_t>() >= 0)) {
      out.id = id.get<uint64_t>();
    } else if (id.is_string()) {
      PointId p;
      if (!parseUuid(id.get<std::string>(), p))
        return err(col("id"),
                   "\"id\" " + id.dump() + " is not a UUID (ids are unsigned integers or UUIDs)");
      out.id = p.toString();
    } else {
      return err(col("id"),
                 "\"id\" " + id.dump().substr(0, 40) + " is not an unsigned integer or a UUID");
    }
    if (!j.contains("vector") || !j["vector"].is_array())
      return err(col("vector"), "missing \"vector\" (an array of numbers)");
    const auto& v = j["vector"];
    if (dim_ == 0) dim_ = v.size();
    if (v.size() != dim_) {
      return err(col("vector"), "\"vector\" has " + std::to_string(v.size()) +
                                    " numbers, the dimension is " + std::to_string(dim_));
    }
    out.vector.resize(dim_);
    for (size_t i = 0; i < dim_; ++i) {
      if (!v[i].is_number())
        return err(col("vector"), "\"vector\"[" + std::to_string(i) + "] is " +
                                      v[i].dump().substr(0, 40) + ", not a number");
      const float x = float(v[i].get<double>());
      if (!std::isfinite(x))
        return err(col("vector"), "\"vector\"[" + std::to_string(i) + "] is not a finite float");
      out.vector[i] = x;
    }
    out.payload = nullptr;
    if (j.contains("payload") && !j["payload"].is_null()) {
      if (!j["payload"].is_object()) return err(col("payload"), "\"payload\" must be an object");
      out.payload = std::move(j["payload"]);
    }
    out.line = lines_.line();
    return true;
  }
  uint64_t offset() const override { return lines_.offset(); }
  uint64_t size() const override { return lines_.size(); }
  size_t dim() const override { return dim_; }

 private:
  Status err(size_t col, const std::string& m) const {
    return lineError(lines_.path(), lines_.line(), col, m);
  }
  size_t dim_;
  LineReader lines_;
};

}  // namespace

Result<std::unique_ptr<VectorFileReader>> VectorFileReader::open(const std::string& path,
                                                                 const ReadOptions& options) {
  const FileFormat f = options.format == FileFormat::kAuto ? formatOf(path) : options.format;
  switch (f) {
    case FileFormat::kFvecs:
    case FileFormat::kIvecs:
    case FileFormat::kBvecs: {
      auto r = std::make_unique<BinaryReader>(f, options);
      INFERA_RETURN_IF_ERROR(r->open(path));
      return std::unique_ptr<VectorFileReader>(std::move(r));
    }
    case FileFormat::kJsonl: {
      auto r = std::make_unique<JsonlReader>(options);
      INFERA_RETURN_IF_ERROR(r->open(path));
      return std::unique_ptr<VectorFileReader>(std::move(r));
    }
    default: {
      auto r = std::make_unique<TsvReader>(options);
      INFERA_RETURN_IF_ERROR(r->open(path));
      return std::unique_ptr<VectorFileReader>(std::move(r));
    }
  }
}

}  // namespace infera::vectors
