// file:///dir — the embedded store that needs no server. The same contract as S3:
// create-only via link(2) of a fully written temporary file (EEXIST means the key
// exists); idempotent delete; listing in byte order of key; metadata in an extended
// attribute of the object's file (or, where there is none, a sidecar). Objects
// and their metadata are written without fsync: flush() makes every one written so far
// durable with one syncfs(2) of the store's filesystem, shared by all connections.
// Here: the object reads and writes, the listing, the helpers file_store.hpp declares and
// the scheme's entry; staged uploads are in file_store_staged.cpp, deletes and the
// temporary files reconcile removes in file_store_remove.cpp.
#include "file_store.hpp"

#include <algorithm>
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
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

namespace lodge::store::file {

Error io_error(const std::string &what, int err) {
  return Error(Errc::storage_unavailable, what + ": " + std::strerror(err));
}

Error part_unreadable(const std::string &what, int err) {
  if (err == EACCES || err == EPERM) return Error(Errc::access_denied, what + ": " + std::strerror(err));
  if (err == ELOOP) return Error(Errc::storage_error, what + ": " + std::strerror(err));
  return io_error(what, err);
}

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

int make_parents(const fs::path &file) {
  fs::path dir = file.parent_path();
  if (dir.empty() || dir == file) return 0;
  if (::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST) return 0;
  if (errno != ENOENT) return errno;
  if (int e = make_parents(dir)) return e;
  return ::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST ? 0 : errno;
}

Status SyncState::flush() {
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

Status FileStore::accepts(const ObjectOptions &o) const {
  if (!o.storage_class.empty())
    return Error(Errc::unsupported, describe() + " is a local directory: it has no storage classes");
  if (!o.sse.empty())
    return Error(Errc::unsupported, describe() + " is a local directory: server-side encryption is for S3 "
                                                 "(encrypt the filesystem instead)");
  return ok_status();
}

Result<PutResult> FileStore::put(const PutRequest &req) {
  if (auto v = check_key(req.key); !v) return v.error();
  auto tmp = write_temp(req.body, req.deadline_steady_ms, obj(req.key), true);
  if (!tmp) return tmp.error();
  return publish(tmp.value(), req.key, req.content_type, req.metadata, req.options, req.body.sha256_hex);
}

Result<ObjectInfo> FileStore::head(const std::string &key) {
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

Status FileStore::read(const std::string &key, const std::function<bool(const char *, size_t)> &sink) {
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
    if (!sink(buf, static_cast<size_t>(n))) return Error(Errc::internal, "GET " + key + ": reading aborted");
  }
}

Status FileStore::remove_small(const std::string &key) {
  if (auto v = check_key(key); !v) return v.error();
  if (::unlink(obj(key).c_str()) != 0 && errno != ENOENT && errno != ENOTDIR)
    return io_error("DELETE " + key, errno);
  return ok_status();
}

// Streams keys in byte order holding one directory's names at a time: siblings are
// sorted as "name/" for directories and "name" for files, which is exactly where their
// keys fall in the order of the whole key ("a-c" < "a/b" because '-' < '/').
Status FileStore::list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) {
  bool stopped = false;
  return walk_sorted(m_root, "", prefix, visit, stopped);
}

Result<SmallObject> FileStore::get_small(const std::string &key) {
  if (auto v = check_key(key); !v) return v.error();
  auto text = read_small(obj(key));
  if (!text) return text.error();
  if (!text.value()) return Error(Errc::not_found, "GET " + key + ": no such object");
  auto tag = crypto::sha256_hex(*text.value());
  return SmallObject{std::move(*text.value()), tag};
}

// The tag is the content's SHA-256; the compare and the replace happen under an
// exclusive flock(2) of the temporary directory, so two processes cannot both win.
Result<std::string> FileStore::put_small(const std::string &key, const std::string &bytes,
                                         const std::string &if_tag) {
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

Status FileStore::walk_sorted(const fs::path &dir, const std::string &rel, const std::string &prefix,
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

// Keys that could escape the root, or land in lodge's own folders, are refused.
Status FileStore::check_key(const std::string &key) {
  auto bad = [&](const char *why) {
    return Error(Errc::storage_error, "invalid object key '" + util::escape_for_terminal(key) + "': " + why);
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
Result<util::AtomicFile> FileStore::temp_file(const fs::path &dest, bool create_only) {
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
Result<util::AtomicFile> FileStore::write_temp(const Body &body, int64_t deadline_steady_ms,
                                               const fs::path &dest, bool create_only) {
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
    if (n < 0) return fail(Error(Errc::unreadable, std::string("reading the file: ") + std::strerror(errno)));
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
Result<PutResult> FileStore::publish(util::AtomicFile &tmp, const std::string &key,
                                     const std::string &content_type, const Metadata &metadata,
                                     const ObjectOptions &options, const std::string &sha256_hex) {
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

// Replaces path's content by rename; `durable`: fsynced (with its directory) before it
// returns, for what no later flush() covers (a staged upload's record).
Status FileStore::write_small(const fs::path &path, const std::string &text, bool durable) {
  util::AtomicFile::Options o;
  o.durable = durable;
  util::AtomicFile f(path.string(), o);
  if (!f.open() || !f.write(text) || !f.commit()) return io_error("write " + path.string(), f.error().err);
  return ok_status();
}

// The scheme's entry: the URL checked and bound, the backend its connections share.
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
} // namespace lodge::store::file

namespace lodge::store {

const Scheme &file_scheme() {
  // No settings of its own: endpoint, ca_bundle and S3's keys are shown as given and ignored.
  static const Scheme k{"file",           "file:///dir", Scheme::Tagging::never,
                        &file::check_url, &file::bind,   {},
                        &common_config,   &file::open};
  return k;
}

} // namespace lodge::store
