// file:///dir — the embedded store that needs no server. The same contract as S3:
// create-only via link(2) of a fully written temporary file (EEXIST means the key
// exists); idempotent delete; listing in byte order of key; metadata in an extended
// attribute of the object's file (or, where there is none, a sidecar). Objects
// and their metadata are written without fsync: flush() makes every one written so far
// durable with one syncfs(2) of the store's filesystem, shared by all connections.
#include "stores.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <lodge/crypto/random.hpp>
#include <lodge/crypto/sha256.hpp>
#include <lodge/http/transport.hpp>
#include <lodge/util/atomic_file.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

namespace lodge::store {
namespace {
namespace fs = std::filesystem;

constexpr const char *k_meta_dir = ".lodge-meta";
// The object's metadata (the sidecar's JSON), as an extended attribute of the object file
// itself: set before the file is linked at its key, so the object appears with its stamp
// in one step, with no second file and directory tree per object. A filesystem without
// user xattrs, or a document too big for one, gets the sidecar under k_meta_dir instead,
// which is also what stores written before keep and are still read from.
constexpr const char *k_meta_xattr = "user.lodge.meta";
constexpr const char *k_tmp_dir = ".lodge-tmp";
// Under k_tmp_dir: an object a delete moved aside, "removing-<ms since the epoch>-<inode>-<uuid>",
// the inode being the one whose stamp the delete read (before: "removing-<uuid>").
constexpr const char *k_removing = "removing-";
constexpr const char *k_mpu_dir = ".lodge-mpu";
constexpr int64_t k_max_part_number = 99'999; // part-%05d

Error io_error(const std::string &what, int err) {
  return Error(Errc::storage_unavailable, what + ": " + std::strerror(err));
}

// A staged part that cannot be read: refused (EACCES, EPERM) or not a part at all (ELOOP: a
// symlink at its path, which lodge never writes) does not pass by itself, unlike a failing
// disk; the codes say so as S3's 403 and 4xx do.
Error part_unreadable(const std::string &what, int err) {
  if (err == EACCES || err == EPERM) return Error(Errc::access_denied, what + ": " + std::strerror(err));
  if (err == ELOOP) return Error(Errc::storage_error, what + ": " + std::strerror(err));
  return io_error(what, err);
}

// When `name`, a regular file under k_tmp_dir, was last in use, in ms since the epoch, if it
// is one of lodge's own temporary files there and provably dead once old; nullopt for any
// other (never removed). util::AtomicFile's (".lodge-" + 16 hex digits + ".tmp"): its last
// write (a writer writes it until it is published, and its transfer ends at its deadline).
// A delete's object moved aside: the time in its name, and only while the file is the inode
// the name gives, the one whose stamp proved it dead. The rename takes whatever is at the
// key, so a file another writer put there in the instant before the move is moved too; a
// kill before the move back leaves it under a removing- name, and its inode is what tells
// it apart. Named before the inode was in the name ("removing-<uuid>"): nothing proves which
// file it is, so it is never removed.
std::optional<int64_t> temp_in_use(std::string_view name, const struct stat &st) {
  auto ms = [](const struct timespec &t) {
    return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1'000'000;
  };
  auto only = [](std::string_view v, std::string_view chars) {
    return !v.empty() && v.find_first_not_of(chars) == std::string_view::npos;
  };
  constexpr std::string_view hex = "0123456789abcdef";
  constexpr std::string_view atomic_prefix = ".lodge-", atomic_suffix = ".tmp";
  if (name.size() == atomic_prefix.size() + 16 + atomic_suffix.size() && name.starts_with(atomic_prefix) &&
      name.ends_with(atomic_suffix) && only(name.substr(atomic_prefix.size(), 16), hex))
    return ms(st.st_mtim);
  if (!name.starts_with(k_removing)) return std::nullopt;
  std::string_view rest = name.substr(std::string_view(k_removing).size());
  constexpr size_t uuid_size = 36;
  if (rest.size() < uuid_size + 4 || !only(rest.substr(rest.size() - uuid_size), "0123456789abcdef-") ||
      rest[rest.size() - uuid_size - 1] != '-')
    return std::nullopt;
  rest.remove_suffix(uuid_size + 1); // "<ms>-<inode>"
  const size_t dash = rest.find('-');
  if (dash == std::string_view::npos || !only(rest.substr(0, dash), "0123456789") ||
      !only(rest.substr(dash + 1), "0123456789"))
    return std::nullopt;
  const auto inode = util::parse_int(rest.substr(dash + 1));
  if (!inode || static_cast<uint64_t>(*inode) != static_cast<uint64_t>(st.st_ino)) return std::nullopt;
  return util::parse_int(rest.substr(0, dash));
}

// The whole of a small file lodge wrote (a sidecar, an upload's record); nullopt when
// it does not exist.
Result<std::optional<std::string>> read_small(const fs::path &path) {
  util::Fd f(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!f.valid()) {
    if (errno == ENOENT) return std::optional<std::string>();
    return io_error("read " + path.string(), errno);
  }
  std::string text;
  char buf[8192];
  while (true) {
    ssize_t n = ::read(f.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("read " + path.string(), errno);
    if (n == 0) return std::optional<std::string>(std::move(text));
    text.append(buf, static_cast<size_t>(n));
  }
}

// The metadata attribute of the file at path; nullopt when it has none (or the filesystem
// keeps none).
Result<std::optional<std::string>> read_meta_xattr(const fs::path &path) {
  std::string text(512, '\0');
  for (int attempt = 0; attempt < 4; ++attempt) {
    ssize_t n = ::lgetxattr(path.c_str(), k_meta_xattr, text.data(), text.size());
    if (n >= 0) {
      text.resize(static_cast<size_t>(n));
      return std::optional<std::string>(std::move(text));
    }
    if (errno == ENODATA || errno == ENOTSUP || errno == ENOENT) return std::optional<std::string>();
    if (errno != ERANGE) return io_error("read the metadata of " + path.string(), errno);
    ssize_t need = ::lgetxattr(path.c_str(), k_meta_xattr, nullptr, 0);
    if (need < 0) return io_error("read the metadata of " + path.string(), errno);
    text.assign(static_cast<size_t>(need), '\0');
  }
  return io_error("read the metadata of " + path.string(), ERANGE);
}

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

// Creates the directories `file` is to be in: the nearest first (an object's key directory
// is new, its parents seldom are), so it costs one mkdir where create_directories stats
// every level first. 0 or the errno.
int make_parents(const fs::path &file) {
  fs::path dir = file.parent_path();
  if (dir.empty() || dir == file) return 0;
  if (::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST) return 0;
  if (errno != ENOENT) return errno;
  if (int e = make_parents(dir)) return e;
  return ::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST ? 0 : errno;
}

// One syncfs(2) at a time for every connection of a backend, on a generation counter: a
// flush needs a syncfs that started after it was called (so after the puts it covers
// returned); it waits for the one running to end, then runs the next itself or finds that
// another caller started it, and waits for that.
class SyncState {
public:
  explicit SyncState(const std::string &root)
      : m_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)), m_root(root) {}

  Status flush() {
    std::unique_lock lock(m_mutex);
    const uint64_t need = m_started + 1; // the first syncfs to start from now on
    while (m_completed < need) {
      if (m_running) {
        m_cv.wait(lock);
        continue;
      }
      m_running = true;
      const uint64_t gen = ++m_started;
      lock.unlock();
      int rc = m_fd.valid() ? ::syncfs(m_fd.get()) : -1;
      int err = m_fd.valid() ? errno : EBADF;
      lock.lock();
      if (rc != 0) {
        m_failed = gen;
        m_errno = err;
      }
      m_completed = gen;
      m_running = false;
      m_cv.notify_all();
    }
    if (m_failed >= need) return io_error("syncfs " + m_root, m_errno);
    return ok_status();
  }

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
  [[nodiscard]] Status accepts(const ObjectOptions &o) const override {
    if (!o.storage_class.empty())
      return Error(Errc::unsupported, describe() + " is a local directory: it has no storage classes");
    if (!o.sse.empty())
      return Error(Errc::unsupported, describe() + " is a local directory: server-side encryption is for S3 "
                                                   "(encrypt the filesystem instead)");
    return ok_status();
  }

  Result<PutResult> put(const PutRequest &req) override {
    if (auto v = check_key(req.key); !v) return v.error();
    auto tmp = write_temp(req.body, req.deadline_steady_ms, obj(req.key), true);
    if (!tmp) return tmp.error();
    return publish(tmp.value(), req.key, req.content_type, req.metadata, req.options, req.body.sha256_hex);
  }

  Result<ObjectInfo> head(const std::string &key) override {
    if (auto v = check_key(key); !v) return v.error();
    struct stat st {};
    if (::lstat(obj(key).c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR)
        return Error(Errc::not_found, "HEAD " + key + ": no such object");
      return io_error("HEAD " + key, errno);
    }
    if (!S_ISREG(st.st_mode)) return Error(Errc::not_found, "HEAD " + key + ": no such object");
    ObjectInfo i;
    i.key = key;
    i.size = static_cast<uint64_t>(st.st_size);
    i.last_modified_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
    fs::path source = obj(key);
    auto text = read_meta_xattr(source);
    if (text && !text.value()) {
      source = meta(key);
      text = read_small(source);
    }
    if (!text) return text.error();
    if (text.value()) {
      auto side = Sidecar::parse(*text.value(), source, "HEAD " + util::escape_for_terminal(key));
      if (!side) return side.error();
      auto content_type = side->text("content_type");
      if (!content_type) return content_type.error();
      auto sha = side->text("sha256");
      if (!sha) return sha.error();
      auto m = side->metadata("metadata");
      if (!m) return m.error();
      i.content_type = content_type.value();
      i.sha256_hex = sha.value();
      i.etag = i.sha256_hex;
      i.metadata = std::move(m.value());
      adopt_legacy_metadata(i.metadata);
    }
    return i;
  }

  Status read(const std::string &key, const std::function<bool(const char *, size_t)> &sink) override {
    if (auto v = check_key(key); !v) return v.error();
    util::Fd in(::open(obj(key).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!in.valid()) {
      if (errno == ENOENT) return Error(Errc::not_found, "GET " + key + ": no such object");
      return io_error("GET " + key, errno);
    }
    char buf[1 << 16];
    while (true) {
      ssize_t n = ::read(in.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error("GET " + key, errno);
      if (n == 0) return ok_status();
      if (m_limiter) m_limiter->acquire(static_cast<uint64_t>(n)); // --bwlimit: bytes read of the store
      if (!sink(buf, static_cast<size_t>(n)))
        return Error(Errc::internal, "GET " + key + ": reading aborted");
    }
  }

  Result<Removal> remove_owned(const std::string &key, const Stamp &stamp, DeleteGuard /*guard*/) override {
    if (auto v = check_key(key); !v) return v.error();
    Removal out;
    if (auto r = remove_object(key, stamp, out); !r) return r.error();
    // No directory fsync: flush() makes the removal durable before its task is finished.
    if (!out.kept.empty()) return out; // its writer may have an upload there too
    std::vector<std::string> ids;
    auto s = list_staged(key, [&](const StagedUpload &u) {
      if (u.key == key) ids.push_back(u.handle);
      return true;
    });
    if (!s) return s.error();
    for (const auto &id : ids)
      if (auto a = abort_staged(key, id); !a) return a.error();
    return out;
  }

  Status remove_small(const std::string &key) override {
    if (auto v = check_key(key); !v) return v.error();
    if (::unlink(obj(key).c_str()) != 0 && errno != ENOENT && errno != ENOTDIR)
      return io_error("DELETE " + key, errno);
    return ok_status();
  }

  // Streams keys in byte order holding one directory's names at a time: siblings are
  // sorted as "name/" for directories and "name" for files, which is exactly where their
  // keys fall in the order of the whole key ("a-c" < "a/b" because '-' < '/').
  Status list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) override {
    bool stopped = false;
    return walk_sorted(m_root, "", prefix, visit, stopped);
  }

  Result<SmallObject> get_small(const std::string &key) override {
    if (auto v = check_key(key); !v) return v.error();
    auto text = read_small(obj(key));
    if (!text) return text.error();
    if (!text.value()) return Error(Errc::not_found, "GET " + key + ": no such object");
    auto tag = crypto::sha256_hex(*text.value());
    return SmallObject{std::move(*text.value()), tag};
  }

  // The tag is the content's SHA-256; the compare and the replace happen under an
  // exclusive flock(2) of the temporary directory, so two processes cannot both win.
  Result<std::string> put_small(const std::string &key, const std::string &bytes,
                                const std::string &if_tag) override {
    if (auto v = check_key(key); !v) return v.error();
    std::error_code ec;
    fs::create_directories(m_root / k_tmp_dir, ec);
    util::Fd lock(::open((m_root / k_tmp_dir).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!lock.valid() || ::flock(lock.get(), LOCK_EX) != 0) return io_error("lock " + m_root.string(), errno);
    auto current = read_small(obj(key));
    if (!current) return current.error();
    bool holds = current.value().has_value();
    if (if_tag.empty() ? holds : (!holds || crypto::sha256_hex(*current.value()) != if_tag))
      return Error(Errc::precondition_failed, "PUT " + key + ": the object changed meanwhile");
    util::AtomicFile::Options o;
    o.temp_dir = (m_root / k_tmp_dir).string(); // durable: fsynced, as is its directory
    util::AtomicFile out(obj(key).string(), o);
    if (!out.open() || !out.write(bytes)) return io_error("PUT " + key, out.error().err);
    fs::create_directories(obj(key).parent_path(), ec);
    if (!out.commit()) return io_error("PUT " + key, out.error().err);
    return crypto::sha256_hex(bytes);
  }

  Result<std::string> begin_staged(const StagedRequest &req) override {
    const auto &key = req.key;
    const auto &content_type = req.content_type;
    const auto &metadata = req.metadata;
    if (auto v = check_key(key); !v) return v.error();
    std::string id = crypto::random_uuid();
    fs::path dir = m_root / k_mpu_dir / id;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return io_error("CREATE MULTIPART " + key, ec.value());
    nlohmann::json j{{"key", key},
                     {"content_type", content_type},
                     {"metadata", metadata},
                     {"initiated_ms", util::system_clock().now_ms()}};
    if (auto w = write_small(dir / "upload.json", j.dump(), true); !w) return w.error();
    return id;
  }

  Result<Part> put_part(const std::string &key, const std::string &upload_id, int number, const Body &body,
                        int64_t deadline_steady_ms) override {
    auto up = load_upload(key, upload_id);
    if (!up) return up.error();
    char name[32];
    std::snprintf(name, sizeof name, "part-%05d", number);
    fs::path dest = m_root / k_mpu_dir / upload_id / name;
    auto tmp = write_temp(body, deadline_steady_ms, dest, false);
    if (!tmp) return tmp.error();
    if (!tmp.value().commit()) return io_error("PUT PART " + key, tmp.value().error().err);
    return Part{number, body.sha256_hex, body.sha256_hex};
  }

  Result<PutResult> complete_staged(const StagedRequest &req, const std::string &upload_id,
                                    const std::vector<Part> &parts, int64_t deadline_steady_ms) override {
    const auto &key = req.key;
    auto up = load_upload(key, upload_id);
    if (!up) return up.error();
    fs::path dir = m_root / k_mpu_dir / upload_id;
    auto made = temp_file(obj(key), true);
    if (!made) return Error(made.error().code, "COMPLETE MULTIPART " + key + ": " + made.error().message);
    util::AtomicFile &tmp = made.value(); // discarded with `made` unless published
    crypto::Sha256 whole;
    for (const auto &p : parts) {
      char name[32];
      std::snprintf(name, sizeof name, "part-%05d", p.number);
      util::Fd in(::open((dir / name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!in.valid()) {
        if (errno != ENOENT) return io_error("COMPLETE MULTIPART " + key + ": part " + name, errno);
        return Error(Errc::storage_error,
                     "COMPLETE MULTIPART " + key + ": part " + std::to_string(p.number) + " missing");
      }
      // A read error is not the end of the part: it fails the completion.
      crypto::Sha256 part;
      char buf[1 << 16];
      while (true) {
        ssize_t n = ::read(in.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return io_error("COMPLETE MULTIPART " + key + ": reading part " + name, errno);
        if (n == 0) break;
        part.update(buf, static_cast<size_t>(n));
        whole.update(buf, static_cast<size_t>(n));
        if (!tmp.write(std::string_view(buf, static_cast<size_t>(n))))
          return io_error("COMPLETE MULTIPART " + key, tmp.error().err);
      }
      // S3 refuses a part whose ETag is not the stored part's; here a part file changed
      // after it was written (or after resume proved it) is caught by its digest.
      if (auto got = crypto::to_hex(part.finish()); !p.sha256_hex.empty() && got != p.sha256_hex)
        return Error(Errc::content_mismatch, "COMPLETE MULTIPART " + key + ": part " +
                                                 std::to_string(p.number) + " (" + (dir / name).string() +
                                                 ") hashes to " + got +
                                                 ", not the SHA-256 it was stored with (" + p.sha256_hex +
                                                 "): it changed after it was written; nothing is published");
    }
    // Made durable by flush(), as a put is.
    if (deadline_steady_ms > 0 && util::steady_ms() >= deadline_steady_ms)
      return Error(Errc::deadline_exceeded, "COMPLETE MULTIPART " + key + ": deadline passed");
    const auto &side = up.value();
    auto content_type = side.text("content_type");
    if (!content_type) return content_type.error();
    auto m = side.metadata("metadata");
    if (!m) return m.error();
    // The object carries its row's digest in its stamp: never bytes that hash otherwise.
    const std::string digest = crypto::to_hex(whole.finish());
    if (auto it = m->find(meta::sha256); it != m->end() && it->second != digest)
      return Error(Errc::content_mismatch, "COMPLETE MULTIPART " + key + ": the parts assembled hash to " +
                                               digest + ", not the SHA-256 the object is stamped with (" +
                                               it->second + "); nothing is published");
    auto r = publish(tmp, key, content_type.value(), m.value(), req.options, digest);
    if (r) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    return r;
  }

  Status abort_staged(const std::string &key, const std::string &upload_id) override {
    auto up = load_upload(key, upload_id);
    if (!up) return up.error().code == Errc::not_found ? ok_status() : Status(up.error());
    std::error_code ec;
    fs::remove_all(m_root / k_mpu_dir / upload_id, ec);
    if (ec) return io_error("ABORT MULTIPART " + key, ec.value());
    return ok_status();
  }

  // The staged directory's part files, each hashed as it is read now: lodge's own store
  // vouches for its bytes (a part file is published whole by rename, so a part sent again
  // replaces it; one torn by a crash hashes to another digest and is sent again).
  Result<std::vector<StoredPart>> list_parts(const std::string &key, const std::string &upload_id) override {
    auto up = load_upload(key, upload_id);
    if (!up) return up.error(); // NOT_FOUND when the staged directory is gone
    const fs::path dir = m_root / k_mpu_dir / upload_id;
    std::vector<StoredPart> out;
    std::error_code ec;
    fs::directory_iterator it(dir, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      constexpr std::string_view k_part = "part-";
      auto number = name.rfind(k_part, 0) == 0 ? util::parse_int(std::string_view(name).substr(k_part.size()))
                                               : std::nullopt;
      if (!number || *number < 1 || *number > k_max_part_number) continue;
      auto hashed = hash_part(it->path(), "LIST PARTS " + key);
      if (!hashed) return hashed.error();
      if (!hashed.value()) continue; // gone meanwhile: checked below
      const auto &[size, sha] = *hashed.value();
      out.push_back(StoredPart{static_cast<int>(*number), size, sha, sha, {}});
    }
    if (ec == std::errc::no_such_file_or_directory || !load_upload(key, upload_id))
      return Error(Errc::not_found, "LIST PARTS " + key + ": multipart upload " + upload_id + " is gone");
    if (ec) return part_unreadable("LIST PARTS " + dir.string(), ec.value());
    std::sort(out.begin(), out.end(),
              [](const StoredPart &a, const StoredPart &b) { return a.number < b.number; });
    return out;
  }

  Status list_staged(const std::string &prefix,
                     const std::function<bool(const StagedUpload &)> &visit) override {
    std::vector<StagedUpload> all;
    std::error_code ec;
    fs::path base = m_root / k_mpu_dir;
    fs::directory_iterator it(base, ec), end;
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory) return ok_status(); // none ever began
      return io_error("LIST UPLOADS " + base.string(), ec.value());
    }
    for (; it != end; it.increment(ec)) {
      if (ec) return io_error("LIST UPLOADS " + base.string(), ec.value());
      std::string id = it->path().filename().string();
      fs::path record = it->path() / "upload.json";
      auto text = read_small(record);
      if (!text) return text.error();
      if (!text.value()) continue; // begun a moment ago, or its abort is under way
      // An unreadable record cannot be matched to any key: say so and leave it alone,
      // so one damaged upload does not stop every key's deletes.
      auto side = Sidecar::parse(*text.value(), record, "LIST UPLOADS");
      auto k = side ? side->text("key") : Result<std::string>(side.error());
      auto initiated = side ? side->integer("initiated_ms") : Result<int64_t>(side.error());
      if (!k || !initiated) {
        util::log::warn("skipping incomplete upload " + id + ": " +
                        (!k ? k.error() : initiated.error()).message);
        continue;
      }
      if (k->compare(0, prefix.size(), prefix) != 0) continue;
      all.push_back({k.value(), id, initiated.value()});
    }
    // A failed increment sets ec and makes `it` the end iterator: the loop ends without
    // passing its check, so look again here.
    if (ec) return io_error("LIST UPLOADS " + base.string(), ec.value());
    std::sort(all.begin(), all.end(), [](const StagedUpload &a, const StagedUpload &b) {
      return a.key != b.key ? a.key < b.key : a.handle < b.handle;
    });
    for (const auto &u : all)
      if (!visit(u)) break;
    return ok_status();
  }

  // lodge's own temporary files under k_tmp_dir (temp_in_use), in name order: what a
  // process killed while writing or deleting left there.
  Status list_temps(const std::function<bool(const StoreTemp &)> &visit) override {
    const fs::path dir = m_root / k_tmp_dir;
    std::vector<StoreTemp> found;
    std::error_code ec;
    fs::directory_iterator it(dir, ec), end;
    if (ec)
      return ec == std::errc::no_such_file_or_directory ? ok_status()
                                                        : io_error("LIST " + dir.string(), ec.value());
    for (; it != end; it.increment(ec)) {
      if (ec) return io_error("LIST " + dir.string(), ec.value());
      const std::string name = it->path().filename().string();
      struct stat st {};
      if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (auto since = temp_in_use(name, st))
        found.push_back({std::string(k_tmp_dir) + "/" + name, *since, static_cast<uint64_t>(st.st_size)});
    }
    if (ec) return io_error("LIST " + dir.string(), ec.value()); // a failed increment ends the loop
    std::sort(found.begin(), found.end(),
              [](const StoreTemp &a, const StoreTemp &b) { return a.name < b.name; });
    for (const auto &t : found)
      if (!visit(t)) break;
    return ok_status();
  }

  // Removes one of list_temps' files, its name and time read again now (a writer may have
  // used it since it was listed).
  Result<bool> remove_temp(const std::string &name, int64_t before_ms) override {
    const std::string under = std::string(k_tmp_dir) + "/";
    const std::string base = name.compare(0, under.size(), under) == 0 ? name.substr(under.size()) : "";
    const fs::path path = m_root / k_tmp_dir / base;
    struct stat st {};
    if (base.empty() || base.find('/') != std::string::npos)
      return Error(Errc::storage_error,
                   "REMOVE " + util::escape_for_terminal(name) + ": not in " + k_tmp_dir);
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return false;
      return io_error("REMOVE " + path.string(), errno);
    }
    auto since = S_ISREG(st.st_mode) ? temp_in_use(base, st) : std::nullopt;
    if (!since)
      return Error(Errc::storage_error, "REMOVE " + util::escape_for_terminal(path.string()) +
                                            ": not a temporary file lodge writes; left alone");
    if (*since >= before_ms) return false;
    if (::unlink(path.c_str()) != 0) {
      if (errno == ENOENT) return false;
      return io_error("REMOVE " + path.string(), errno);
    }
    return true;
  }

private:
  Status walk_sorted(const fs::path &dir, const std::string &rel, const std::string &prefix,
                     const std::function<bool(const ObjectInfo &)> &visit, bool &stopped) {
    struct Entry {
      std::string sort_key; // name, plus '/' for a directory
      std::string name;
      bool is_dir;
    };
    std::vector<Entry> entries;
    std::error_code ec;
    fs::directory_iterator it(dir, ec), end;
    if (ec)
      return ec == std::errc::no_such_file_or_directory ? ok_status()
                                                        : io_error("LIST " + dir.string(), ec.value());
    for (; it != end; it.increment(ec)) {
      if (ec) return io_error("LIST " + dir.string(), ec.value());
      std::string name = it->path().filename().string();
      if (rel.empty() && name.rfind(".lodge-", 0) == 0) continue;
      struct stat st {};
      if (::lstat(it->path().c_str(), &st) != 0) continue;
      bool is_dir = S_ISDIR(st.st_mode);
      if (!is_dir && !S_ISREG(st.st_mode)) continue; // never follow links out of the root
      std::string key = rel + name + (is_dir ? "/" : "");
      // Prune what cannot hold a key with the prefix.
      size_t n = std::min(key.size(), prefix.size());
      if (key.compare(0, n, prefix, 0, n) != 0) continue;
      entries.push_back({name + (is_dir ? "/" : ""), name, is_dir});
    }
    if (ec) return io_error("LIST " + dir.string(), ec.value()); // a failed increment ends the loop
    std::sort(entries.begin(), entries.end(),
              [](const Entry &a, const Entry &b) { return a.sort_key < b.sort_key; });
    for (const auto &e : entries) {
      if (stopped) break;
      if (e.is_dir) {
        if (auto r = walk_sorted(dir / e.name, rel + e.name + "/", prefix, visit, stopped); !r) return r;
        continue;
      }
      struct stat st {};
      if (::lstat((dir / e.name).c_str(), &st) != 0) continue;
      ObjectInfo i;
      i.key = rel + e.name;
      if (i.key.compare(0, prefix.size(), prefix) != 0) continue;
      i.size = static_cast<uint64_t>(st.st_size);
      i.last_modified_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
      if (!visit(i)) stopped = true;
    }
    return ok_status();
  }

  [[nodiscard]] fs::path obj(const std::string &key) const { return m_root / key; }
  [[nodiscard]] fs::path meta(const std::string &key) const { return m_root / k_meta_dir / (key + ".json"); }

  // Why the open file `f` (at `key`) is not stamped as `stamp`'s: its metadata (the
  // xattr of this very inode, else the sidecar) must name it, and the bytes must hash to
  // the digest recorded with it, since a plain write over the file in place (open with
  // O_TRUNC) keeps the inode and its attribute. nullopt: it is ours.
  Result<std::optional<std::string>> not_stamped(const std::string &key, int f, const Stamp &stamp) {
    std::string doc(4096, '\0');
    ssize_t n = ::fgetxattr(f, k_meta_xattr, doc.data(), doc.size());
    if (n < 0 && errno == ERANGE) {
      n = ::fgetxattr(f, k_meta_xattr, nullptr, 0);
      if (n >= 0) {
        doc.assign(static_cast<size_t>(n), '\0');
        n = ::fgetxattr(f, k_meta_xattr, doc.data(), doc.size());
      }
    }
    fs::path source = obj(key);
    if (n >= 0) {
      doc.resize(static_cast<size_t>(n));
    } else {
      if (errno != ENODATA && errno != ENOTSUP)
        return io_error("read the metadata of " + source.string(), errno);
      source = meta(key);
      auto side = read_small(source);
      if (!side) return side.error();
      if (!side.value()) return std::optional<std::string>("it has no lodge stamp (another tool wrote it)");
      doc = std::move(*side.value());
    }
    auto side = Sidecar::parse(doc, source, "DELETE " + util::escape_for_terminal(key));
    auto m = side ? side->metadata("metadata") : Result<Metadata>(side.error());
    auto sha = side ? side->text("sha256") : Result<std::string>(side.error());
    if (!m || !sha)
      return std::optional<std::string>("its stamp cannot be read: " +
                                        (!m ? m.error().message : sha.error().message));
    adopt_legacy_metadata(m.value());
    if (auto why = stamp_mismatch(m.value(), stamp.ledger_uuid, stamp.record_id)) return why;
    crypto::Sha256 h;
    char buf[1 << 16];
    for (off_t at = 0;;) {
      ssize_t got = ::pread(f, buf, sizeof buf, at);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return io_error("read " + source.string(), errno);
      if (got == 0) break;
      h.update(buf, static_cast<size_t>(got));
      at += got;
    }
    if (crypto::to_hex(h.finish()) != sha.value())
      return std::optional<std::string>("its stamp is this record's, but its bytes are not the ones stamped "
                                        "(written over in place by another tool)");
    return std::optional<std::string>();
  }

  // The object at `key`, if it is stamp's (not_stamped). Unlinking by name could remove
  // a file renamed over the key after the stamp was read, so it is first moved aside
  // (rename(2) takes whatever is at the key in one step) and removed only if it is the
  // inode read; anything else is put back (RENAME_NOREPLACE) and the delete fails, for the
  // caller's retry to look again. What remains: a crash between the move and the unlink
  // leaves the file under .lodge-tmp/ with the time of the move and the stamped inode in its
  // name (reconcile removes it once no delete can still be running, and only if it is that
  // inode: temp_in_use); a third file arriving at
  // the key in the microseconds between the move and the move back leaves the second where
  // the error says, under a name reconcile never removes.
  Status remove_object(const std::string &key, const Stamp &stamp, Removal &out) {
    const fs::path path = obj(key);
    util::Fd f(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!f.valid()) {
      if (errno == ENOENT || errno == ENOTDIR) return remove_sidecar(key);
      if (errno == ELOOP) {
        out.kept.push_back(key + ": a symbolic link (lodge never makes one)");
        return ok_status();
      }
      return io_error("DELETE " + key, errno);
    }
    struct stat st {};
    if (::fstat(f.get(), &st) != 0) return io_error("DELETE " + key, errno);
    if (!S_ISREG(st.st_mode)) {
      out.kept.push_back(key + ": not a regular file");
      return ok_status();
    }
    auto why = not_stamped(key, f.get(), stamp);
    if (!why) return why.error();
    if (why.value()) {
      out.kept.push_back(key + ": " + *why.value());
      return ok_status();
    }
    // Not a write-then-publish (util::AtomicFile): these renames move an existing object
    // aside and, when it is not the one stamped, back; no new bytes get a name here.
    const fs::path aside = m_root / k_tmp_dir /
                           (std::string(k_removing) + std::to_string(util::system_clock().now_ms()) + "-" +
                            std::to_string(st.st_ino) + "-" + crypto::random_uuid());
    if (int e = make_parents(aside)) return io_error("DELETE " + key, e);
    if (::rename(path.c_str(), aside.c_str()) != 0) {
      if (errno == ENOENT) return remove_sidecar(key); // removed meanwhile
      return io_error("DELETE " + key, errno);
    }
    struct stat moved {};
    if (::lstat(aside.c_str(), &moved) == 0 && moved.st_dev == st.st_dev && moved.st_ino == st.st_ino) {
      if (::unlink(aside.c_str()) != 0) return io_error("DELETE " + key, errno);
      ++out.removed;
      return remove_sidecar(key);
    }
    if (::renameat2(AT_FDCWD, aside.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
      const int e = errno;
      // Not lodge's to remove: away from the names reconcile removes by age.
      const fs::path kept = m_root / k_tmp_dir / ("kept-" + crypto::random_uuid());
      const bool set_apart =
          ::renameat2(AT_FDCWD, aside.c_str(), AT_FDCWD, kept.c_str(), RENAME_NOREPLACE) == 0;
      return io_error("DELETE " + key + ": another file arrived at the key meanwhile and is left at " +
                          (set_apart ? kept : aside).string(),
                      e);
    }
    return Error(Errc::storage_error,
                 "DELETE " + key + ": it changed between reading its stamp and its delete");
  }

  // The sidecar of an object that is gone (stores without xattrs, or written before them).
  Status remove_sidecar(const std::string &key) {
    if (::unlink(meta(key).c_str()) != 0 && errno != ENOENT && errno != ENOTDIR)
      return io_error("DELETE " + key, errno);
    return ok_status();
  }

  // Keys that could escape the root, or land in lodge's own folders, are refused.
  static Status check_key(const std::string &key) {
    auto bad = [&](const char *why) {
      return Error(Errc::storage_error,
                   "invalid object key '" + util::escape_for_terminal(key) + "': " + why);
    };
    if (key.empty() || key.size() > 1024) return bad("empty or too long");
    if (key.front() == '/') return bad("absolute");
    if (key.find('\0') != std::string::npos) return bad("NUL byte");
    for (const auto &seg : util::split(key, '/')) {
      if (seg.empty() || seg == "." || seg == "..") return bad("empty, '.' or '..' path segment");
    }
    if (key.rfind(".lodge-", 0) == 0) return bad("reserved name");
    return ok_status();
  }

  // A temporary file under k_tmp_dir (made on first use), to be published at `dest`: without
  // a name where the filesystem allows, so a process killed while writing it leaves nothing
  // (objects and parts alike); by `create_only`, linked at dest only if nothing is there,
  // otherwise over what is (a part sent again). Where the filesystem gives it a name, a kill
  // leaves it for reconcile (list_temps). Not fsynced: flush() makes it durable before
  // anything relies on it.
  Result<util::AtomicFile> temp_file(const fs::path &dest, bool create_only) {
    util::AtomicFile::Options o;
    o.temp_dir = (m_root / k_tmp_dir).string();
    o.durable = false;
    o.replace = !create_only;
    o.anonymous = true;
    util::AtomicFile f(dest.string(), o);
    if (f.open()) return f;
    if (f.error().err != ENOENT) return io_error("PUT", f.error().err);
    std::error_code ec;
    fs::create_directories(m_root / k_tmp_dir, ec);
    if (!f.open()) return io_error("PUT", f.error().err);
    return f;
  }

  // Copies the body's range into a new temporary file for `dest` (temp_file), verifying
  // its digest.
  Result<util::AtomicFile> write_temp(const Body &body, int64_t deadline_steady_ms, const fs::path &dest,
                                      bool create_only) {
    auto made = temp_file(dest, create_only);
    if (!made) return made.error();
    util::AtomicFile tmp = std::move(made.value());
    crypto::Sha256 h;
    char buf[1 << 16];
    uint64_t done = 0;
    auto fail = [&](Error e) -> Result<util::AtomicFile> {                  // tmp goes with its destructor
      if (body.sent) body.sent->fetch_sub(done, std::memory_order_relaxed); // not sent after all
      return e;
    };
    while (done < body.size) {
      // A watched body's bound moves as its bytes land (body.watch); the deadline given is its start.
      const int64_t bound = body.watch ? body.watch->bound_ms() : deadline_steady_ms;
      if (bound > 0 && util::steady_ms() >= bound)
        return fail(Error(Errc::deadline_exceeded, "PUT: deadline passed during the transfer"));
      if (http::abort_requested()) return fail(Error(Errc::interrupted, "PUT: aborted by a second signal"));
      size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof buf, body.size - done));
      if (m_limiter) want = static_cast<size_t>(std::min<uint64_t>(want, m_limiter->max_chunk()));
      ssize_t n = ::pread(body.fd, buf, want, static_cast<off_t>(body.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        return fail(Error(Errc::unreadable, std::string("reading the file: ") + std::strerror(errno)));
      if (n == 0) return fail(Error(Errc::file_changed, "the file shrank while it was being stored"));
      // --bwlimit: the bytes "sent" wait for the budget, as an HTTP store's do.
      if (m_limiter) m_limiter->acquire(static_cast<uint64_t>(n));
      h.update(buf, static_cast<size_t>(n));
      if (!tmp.write(std::string_view(buf, static_cast<size_t>(n))))
        return fail(io_error("PUT", tmp.error().err));
      done += static_cast<uint64_t>(n);
      if (body.sent) body.sent->fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      if (body.watch) body.watch->on_bytes(static_cast<uint64_t>(n));
    }
    // No fsync: flush() makes it durable before anything relies on it.
    if (!body.sha256_hex.empty() && crypto::to_hex(h.finish()) != body.sha256_hex)
      return fail(Error(Errc::file_changed, "the file changed while it was being stored"));
    return tmp;
  }

  // Sets a complete temporary file's metadata (an xattr), then links it at its key
  // (create-only); where no xattr can hold the metadata, a sidecar is written after. Cache-
  // Control and the user's tags are kept beside the content type. Unless published, the
  // caller's tmp is discarded when it goes.
  Result<PutResult> publish(util::AtomicFile &tmp, const std::string &key, const std::string &content_type,
                            const Metadata &metadata, const ObjectOptions &options,
                            const std::string &sha256_hex) {
    fs::path dest = obj(key);
    nlohmann::json j{{"content_type", content_type}, {"metadata", metadata}, {"sha256", sha256_hex}};
    if (!options.cache_control.empty()) j["cache_control"] = options.cache_control;
    if (!options.tags.empty()) j["tags"] = options.tags;
    const std::string doc = j.dump();
    bool in_xattr = ::fsetxattr(tmp.fd(), k_meta_xattr, doc.data(), doc.size(), 0) == 0;
    if (int e = errno; !in_xattr && e != ENOTSUP && e != E2BIG && e != ENOSPC && e != ERANGE)
      return io_error("PUT " + key + ": writing its metadata", e);
    if (int e = make_parents(dest)) return io_error("PUT " + key, e);
    if (!tmp.commit()) {
      const int e = tmp.error().err;
      if (e == EEXIST) {
        ErrorDetails d;
        d.http_status = 412;
        return Error(Errc::precondition_failed, "PUT " + key + ": the key already exists", d);
      }
      return io_error("PUT " + key, e);
    }
    if (!in_xattr) {
      (void)make_parents(meta(key)); // write_small says what failed
      if (auto w = write_small(meta(key), doc, false); !w) return w.error();
    }
    return PutResult{sha256_hex, ""};
  }

  // A part file's size and SHA-256 as read now; nullopt when it is gone.
  static Result<std::optional<std::pair<uint64_t, std::string>>> hash_part(const fs::path &path,
                                                                           const std::string &what) {
    util::Fd in(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!in.valid()) {
      if (errno == ENOENT) return std::optional<std::pair<uint64_t, std::string>>();
      return part_unreadable(what + ": " + path.string(), errno);
    }
    crypto::Sha256 h;
    uint64_t size = 0;
    std::string buf(static_cast<size_t>(1) << 16, '\0');
    while (true) {
      ssize_t n = ::read(in.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return part_unreadable(what + ": reading " + path.string(), errno);
      if (n == 0) break;
      h.update(buf.data(), static_cast<size_t>(n));
      size += static_cast<uint64_t>(n);
    }
    return std::optional(std::make_pair(size, crypto::to_hex(h.finish())));
  }

  // Replaces path's content by rename; `durable`: fsynced (with its directory) before it
  // returns, for what no later flush() covers (a staged upload's record).
  Status write_small(const fs::path &path, const std::string &text, bool durable) {
    util::AtomicFile::Options o;
    o.durable = durable;
    util::AtomicFile f(path.string(), o);
    if (!f.open() || !f.write(text) || !f.commit()) return io_error("write " + path.string(), f.error().err);
    return ok_status();
  }

  Result<Sidecar> load_upload(const std::string &key, const std::string &upload_id) {
    if (upload_id.empty() || upload_id.find('/') != std::string::npos ||
        upload_id.find("..") != std::string::npos)
      return Error(Errc::not_found, "no such multipart upload");
    fs::path record = m_root / k_mpu_dir / upload_id / "upload.json";
    auto text = read_small(record);
    if (!text) return text.error();
    if (!text.value())
      return Error(Errc::not_found, "multipart upload " + upload_id + " of " + key + ": no such upload");
    auto side = Sidecar::parse(*text.value(), record, "multipart upload " + upload_id + " of " + key);
    if (!side) return side.error();
    auto k = side->text("key");
    if (!k) return k.error();
    if (k.value() != key)
      return Error(Errc::not_found, "multipart upload " + upload_id + " of " + key + ": no such upload");
    return side;
  }

  std::string m_url;
  fs::path m_root;
  std::string m_prefix;
  std::shared_ptr<SyncState> m_sync;
  std::shared_ptr<util::TokenBucket> m_limiter; // null: unlimited
};
} // namespace

namespace {
void check_url(const std::string &url) {
  std::string root = url.substr(7);
  if (root.empty() || root[0] != '/')
    throw LodgeError(Errc::config_invalid,
                     "store: file:// needs an absolute path, as in file:///srv/lodge (got '" + url + "')");
  std::string dir = root.substr(1);
  if (!dir.empty() && dir.back() == '/') dir.pop_back();
  refuse_unsafe(url, "directory", dir);
}

Binding bind(const std::string &url, const std::string & /*endpoint*/) {
  std::string dir = url.substr(7);
  if (dir.empty()) dir = ".";
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(dir), ec);
  if (ec) throw LodgeError(Errc::config_invalid, "store: cannot resolve the directory of '" + url + "'");
  // Symlinks resolved for the part that exists, '.', '..' and doubled '/' for the rest.
  fs::path canon = fs::weakly_canonical(p, ec);
  std::string s = (ec ? p.lexically_normal() : canon.lexically_normal()).string();
  while (s.size() > 1 && s.back() == '/')
    s.pop_back();
  Binding b;
  b.scheme = "file";
  b.location = s;
  return b;
}

// The directory exists once the backend is opened; connections share nothing else.
class FileBackend final : public Backend {
public:
  FileBackend(std::string url, std::shared_ptr<util::TokenBucket> limiter)
      : m_url(std::move(url)), m_root(m_url.substr(7)), m_limiter(std::move(limiter)) {
    std::error_code ec;
    fs::create_directories(m_root, ec);
    if (ec) throw LodgeError(Errc::config_invalid, "store: cannot create " + m_root + ": " + ec.message());
    m_sync = std::make_shared<SyncState>(m_root);
  }
  std::unique_ptr<ObjectStore> connect() override {
    return with_failpoints(std::make_unique<FileStore>(m_url, fs::path(m_root), m_sync, m_limiter));
  }
  [[nodiscard]] std::optional<CredentialView> credentials() const override { return std::nullopt; }

private:
  std::string m_url;
  std::string m_root;
  std::shared_ptr<SyncState> m_sync;
  std::shared_ptr<util::TokenBucket> m_limiter;
};

std::shared_ptr<Backend> open(const StoreOptions &o) {
  return std::make_shared<FileBackend>(o.url, o.limiter);
}
} // namespace

const Scheme &file_scheme() {
  // No settings of its own: endpoint, ca_bundle and S3's keys are shown as given and ignored.
  static const Scheme k{"file",         "file:///dir", Scheme::Tagging::never, &check_url, &bind, {},
                        &common_config, &open};
  return k;
}

} // namespace lodge::store
