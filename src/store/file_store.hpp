#pragma once
// Internal to the file:// store (file_store.cpp, file_store_staged.cpp, file_store_remove.cpp):
// the layout of its directory, the reads of small files and of the metadata attribute, a
// sidecar's checked fields, the syncfs(2) its connections share, and FileStore, one
// connection.

#include "stores.hpp"

#include <condition_variable>
#include <cstdint>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <lodge/util/atomic_file.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/token_bucket.hpp>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lodge::store::file {
namespace fs = std::filesystem;

inline constexpr const char *k_meta_dir = ".lodge-meta";
// The object's metadata (the sidecar's JSON), as an extended attribute of the object file
// itself: set before the file is linked at its key, so the object appears with its stamp
// in one step, with no second file and directory tree per object. A filesystem without
// user xattrs, or a document too big for one, gets the sidecar under k_meta_dir instead,
// which is also what stores written before keep and are still read from.
inline constexpr const char *k_meta_xattr = "user.lodge.meta";
inline constexpr const char *k_tmp_dir = ".lodge-tmp";
// Under k_tmp_dir: an object a delete moved aside, "removing-<ms since the epoch>-<inode>-<uuid>",
// the inode being the one whose stamp the delete read (before: "removing-<uuid>").
inline constexpr const char *k_removing = "removing-";
inline constexpr const char *k_mpu_dir = ".lodge-mpu";
inline constexpr int64_t k_max_part_number = 99'999; // part-%05d

// "<what>: <strerror(err)>" as STORAGE_UNAVAILABLE.
Error io_error(const std::string &what, int err);
// A staged part that cannot be read: refused (EACCES, EPERM) or not a part at all (ELOOP: a
// symlink at its path, which lodge never writes) does not pass by itself, unlike a failing
// disk; the codes say so as S3's 403 and 4xx do.
Error part_unreadable(const std::string &what, int err);

// The whole of a small file lodge wrote (a sidecar, an upload's record); nullopt when
// it does not exist.
Result<std::optional<std::string>> read_small(const fs::path &path);
// The metadata attribute of the file at path; nullopt when it has none (or the filesystem
// keeps none).
Result<std::optional<std::string>> read_meta_xattr(const fs::path &path);

// Creates the directories `file` is to be in: the nearest first (an object's key directory
// is new, its parents seldom are), so it costs one mkdir where create_directories stats
// every level first. 0 or the errno.
int make_parents(const fs::path &file);

// A sidecar's JSON, checked field by field: a file that is not a JSON object, or a field
// of the wrong type, is METADATA_CORRUPT naming the file and the field (never a throw).
class Sidecar {
public:
  static Result<Sidecar> parse(const std::string &text, const fs::path &path, const std::string &what) {
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded())
      return Error(Errc::metadata_corrupt, what + ": " + path.string() + " is not valid JSON");
    if (!j.is_object())
      return Error(Errc::metadata_corrupt, what + ": " + path.string() + " holds JSON " +
                                               std::string(j.type_name()) + ", not an object");
    return Sidecar(std::move(j), path, what);
  }
  // A string field; "" when absent.
  [[nodiscard]] Result<std::string> text(const char *name) const {
    auto it = m_j.find(name);
    if (it == m_j.end() || it->is_null()) return std::string{};
    if (!it->is_string()) return wrong(name, *it, "a string");
    return it->get<std::string>();
  }
  // An integer field; 0 when absent.
  [[nodiscard]] Result<int64_t> integer(const char *name) const {
    auto it = m_j.find(name);
    if (it == m_j.end() || it->is_null()) return int64_t{0};
    if (!it->is_number_integer()) return wrong(name, *it, "an integer");
    return it->get<int64_t>();
  }
  // An object of string values; empty when absent.
  [[nodiscard]] Result<Metadata> metadata(const char *name) const {
    Metadata m;
    auto it = m_j.find(name);
    if (it == m_j.end() || it->is_null()) return m;
    if (!it->is_object()) return wrong(name, *it, "an object of strings");
    for (const auto &[k, v] : it->items()) {
      if (!v.is_string()) return wrong((std::string(name) + "." + k).c_str(), v, "a string");
      m[k] = v.get<std::string>();
    }
    return m;
  }

private:
  Sidecar(nlohmann::json j, fs::path path, std::string what)
      : m_j(std::move(j)), m_path(std::move(path)), m_what(std::move(what)) {}
  [[nodiscard]] Error wrong(const char *name, const nlohmann::json &v, const char *want) const {
    return Error(Errc::metadata_corrupt, m_what + ": " + m_path.string() + ": field '" +
                                             util::escape_for_terminal(name) + "' is " + v.type_name() +
                                             ", expected " + want);
  }
  nlohmann::json m_j;
  fs::path m_path;
  std::string m_what;
};

// One syncfs(2) at a time for every connection of a backend, on a generation counter: a
// flush needs a syncfs that started after it was called (so after the puts it covers
// returned); it waits for the one running to end, then runs the next itself or finds that
// another caller started it, and waits for that.
class SyncState {
public:
  explicit SyncState(const std::string &root)
      : m_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)), m_root(root) {}
  Status flush();

private:
  util::Fd m_fd;
  std::string m_root;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  uint64_t m_started = 0;   // syncfs calls begun
  uint64_t m_completed = 0; // the generation of the last one that ended
  uint64_t m_failed = 0;    // the generation of the last one that failed
  int m_errno = 0;
  bool m_running = false;
};

class FileStore final : public ObjectStore {
public:
  FileStore(std::string url, fs::path root, std::shared_ptr<SyncState> sync,
            std::shared_ptr<util::TokenBucket> limiter)
      : m_url(std::move(url)), m_root(std::move(root)), m_sync(std::move(sync)),
        m_limiter(std::move(limiter)) {}

  Status flush() override { return m_sync->flush(); }
  [[nodiscard]] const void *flush_domain() const override { return m_sync.get(); }
  [[nodiscard]] std::function<Status()> flusher() const override {
    return [sync = m_sync] { return sync->flush(); };
  }
  [[nodiscard]] std::string describe() const override { return m_url; }
  [[nodiscard]] const std::string &key_prefix() const override { return m_prefix; }
  [[nodiscard]] Support support(Capability /*capability*/) const override { return Support::present; }
  [[nodiscard]] Capabilities capabilities() const override {
    Capabilities c;
    c.staged_listing = true;
    return c;
  }
  // No state tags here; the user's tags are in the object's metadata file.
  Status mark_committed(const std::string & /*key*/,
                        const std::map<std::string, std::string> & /*user_tags*/) override {
    return ok_status();
  }

  // Defined in file_store.cpp.
  [[nodiscard]] Status accepts(const ObjectOptions &o) const override;
  Result<PutResult> put(const PutRequest &req) override;
  Result<ObjectInfo> head(const std::string &key) override;
  Status read(const std::string &key, const std::function<bool(const char *, size_t)> &sink) override;
  Status remove_small(const std::string &key) override;
  Status list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) override;
  Result<SmallObject> get_small(const std::string &key) override;
  Result<std::string> put_small(const std::string &key, const std::string &bytes,
                                const std::string &if_tag) override;
  // Defined in file_store_staged.cpp.
  Result<std::string> begin_staged(const StagedRequest &req) override;
  Result<Part> put_part(const std::string &key, const std::string &upload_id, int number, const Body &body,
                        int64_t deadline_steady_ms) override;
  Result<PutResult> complete_staged(const StagedRequest &req, const std::string &upload_id,
                                    const std::vector<Part> &parts, int64_t deadline_steady_ms) override;
  Status abort_staged(const std::string &key, const std::string &upload_id) override;
  Result<std::vector<StoredPart>> list_parts(const std::string &key, const std::string &upload_id) override;
  Status list_staged(const std::string &prefix,
                     const std::function<bool(const StagedUpload &)> &visit) override;
  // Defined in file_store_remove.cpp.
  Result<Removal> remove_owned(const std::string &key, const Stamp &stamp, DeleteGuard /*guard*/) override;
  Status list_temps(const std::function<bool(const StoreTemp &)> &visit) override;
  Result<bool> remove_temp(const std::string &name, int64_t before_ms) override;

private:
  [[nodiscard]] fs::path obj(const std::string &key) const { return m_root / key; }
  [[nodiscard]] fs::path meta(const std::string &key) const { return m_root / k_meta_dir / (key + ".json"); }
  // Defined in file_store.cpp.
  Status walk_sorted(const fs::path &dir, const std::string &rel, const std::string &prefix,
                     const std::function<bool(const ObjectInfo &)> &visit, bool &stopped);
  static Status check_key(const std::string &key);
  Result<util::AtomicFile> temp_file(const fs::path &dest, bool create_only);
  Result<util::AtomicFile> write_temp(const Body &body, int64_t deadline_steady_ms, const fs::path &dest,
                                      bool create_only);
  Result<PutResult> publish(util::AtomicFile &tmp, const std::string &key, const std::string &content_type,
                            const Metadata &metadata, const ObjectOptions &options,
                            const std::string &sha256_hex);
  Status write_small(const fs::path &path, const std::string &text, bool durable);
  // Defined in file_store_staged.cpp.
  Result<Sidecar> load_upload(const std::string &key, const std::string &upload_id);
  static Result<std::optional<std::pair<uint64_t, std::string>>> hash_part(const fs::path &path,
                                                                           const std::string &what);
  // Defined in file_store_remove.cpp.
  Result<std::optional<std::string>> not_stamped(const std::string &key, int f, const Stamp &stamp);
  Status remove_object(const std::string &key, const Stamp &stamp, Removal &out);
  Status remove_sidecar(const std::string &key);

  std::string m_url;
  fs::path m_root;
  std::string m_prefix;
  std::shared_ptr<SyncState> m_sync;
  std::shared_ptr<util::TokenBucket> m_limiter; // null: unlimited
};

} // namespace lodge::store::file
