// file:// deletes and what they and killed writers leave: a guarded delete (the object
// removed only while it is the inode whose stamp was read, with its staged uploads), and
// the temporary files under .lodge-tmp/ that reconcile lists and removes once provably dead.
#include "file_store.hpp"

#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <lodge/crypto/random.hpp>
#include <lodge/crypto/sha256.hpp>
#include <lodge/util/clock.hpp>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

namespace lodge::store::file {
namespace {

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
} // namespace

Result<Removal> FileStore::remove_owned(const std::string &key, const Stamp &stamp, DeleteGuard /*guard*/) {
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

// lodge's own temporary files under k_tmp_dir (temp_in_use), in name order: what a
// process killed while writing or deleting left there.
Status FileStore::list_temps(const std::function<bool(const StoreTemp &)> &visit) {
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
Result<bool> FileStore::remove_temp(const std::string &name, int64_t before_ms) {
  const std::string under = std::string(k_tmp_dir) + "/";
  const std::string base = name.compare(0, under.size(), under) == 0 ? name.substr(under.size()) : "";
  const fs::path path = m_root / k_tmp_dir / base;
  struct stat st {};
  if (base.empty() || base.find('/') != std::string::npos)
    return Error(Errc::storage_error, "REMOVE " + util::escape_for_terminal(name) + ": not in " + k_tmp_dir);
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

// Why the open file `f` (at `key`) is not stamped as `stamp`'s: its metadata (the
// xattr of this very inode, else the sidecar) must name it, and the bytes must hash to
// the digest recorded with it, since a plain write over the file in place (open with
// O_TRUNC) keeps the inode and its attribute. nullopt: it is ours.
Result<std::optional<std::string>> FileStore::not_stamped(const std::string &key, int f, const Stamp &stamp) {
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
Status FileStore::remove_object(const std::string &key, const Stamp &stamp, Removal &out) {
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
Status FileStore::remove_sidecar(const std::string &key) {
  if (::unlink(meta(key).c_str()) != 0 && errno != ENOENT && errno != ENOTDIR)
    return io_error("DELETE " + key, errno);
  return ok_status();
}

} // namespace lodge::store::file
