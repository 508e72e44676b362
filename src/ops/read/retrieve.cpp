#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <lodge/crypto/sha256.hpp>
#include <lodge/match/filter.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/ops/read/retrieve.hpp>
#include <lodge/util/atomic_file.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace lodge::ops {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

Error io_error(const std::string &what, int err) {
  return Error(Errc::io_error, what + ": " + errno_text(err));
}

// "#12 (tree/a.txt)": how messages name a row.
std::string describe(const ledger::FileRecord &r) {
  return "#" + std::to_string(r.id) + " (" + util::escape_for_terminal(restore_path(r)) + ")";
}

bool all_digits(const std::string &s) {
  return !s.empty() && s.size() <= 18 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string join(const std::string &dir, const std::string &name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// The SHA-256 and size of an existing regular file (opened without following a link).
Result<std::pair<std::string, int64_t>> hash_existing(int dir, const std::string &name,
                                                      const std::string &shown) {
  util::Fd f(::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!f.valid()) return io_error("reading the existing " + shown, errno);
  crypto::Sha256 h;
  int64_t total = 0;
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(f.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("reading the existing " + shown, errno);
    if (n == 0) break;
    h.update(buf, static_cast<size_t>(n));
    total += n;
  }
  return std::make_pair(crypto::to_hex(h.finish()), total);
}

// Opens (creating when missing) each directory of `dirs` under root, one component at a
// time, never following a symlink: a component that is a link or not a directory is
// refused. Returns the last one (a duplicate of root when dirs is empty).
Result<util::Fd> open_subdirs(int root, const std::vector<std::string> &dirs, const std::string &shown_root) {
  util::Fd cur(::fcntl(root, F_DUPFD_CLOEXEC, 0));
  if (!cur.valid()) return io_error("opening " + (shown_root.empty() ? std::string(".") : shown_root), errno);
  std::string shown = shown_root;
  for (const auto &d : dirs) {
    shown = join(shown, d);
    bool made = ::mkdirat(cur.get(), d.c_str(), 0777) == 0;
    if (!made && errno != EEXIST)
      return io_error("creating directory " + util::escape_for_terminal(shown), errno);
    if (made && ::fsync(cur.get()) != 0) return io_error("fsync of the directory above " + shown, errno);
    util::Fd next(::openat(cur.get(), d.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      int err = errno;
      if (err == ELOOP || err == ENOTDIR)
        return Error(Errc::output_exists, util::escape_for_terminal(shown) +
                                              " exists and is not a directory (a symlink is never followed)");
      return io_error("opening directory " + util::escape_for_terminal(shown), err);
    }
    cur = std::move(next);
  }
  return cur;
}

} // namespace

FileRef parse_file_ref(const std::string &token) {
  FileRef ref;
  if (all_digits(token))
    ref.id = std::stoll(token);
  else
    ref.path = token;
  return ref;
}

std::string restore_path(const ledger::FileRecord &r) {
  return r.relative_path.empty() ? r.original_name : r.relative_path;
}

Result<ledger::FileRecord> find_record(ledger::LedgerReports &l, const FileRef &ref, const std::string &owner,
                                       const std::string &prefix) {
  if (ref.id) {
    auto r = l.find_file(*ref.id);
    if (!r)
      return Error(Errc::not_found, "no file with id " + std::to_string(*ref.id) + " in " + l.location());
    return *r;
  }
  auto alive = l.find_by_path(owner, prefix, ref.path);
  if (!alive.empty()) return alive.front(); // the newest
  // No alive ACTIVE row: the newest row of that path, if any, says why (require_active).
  ledger::FileQuery f;
  f.owner = owner;
  f.run_prefix = prefix;
  f.path = ref.path;
  f.include_dead = true;
  f.descending = true;
  f.limit = 1;
  std::optional<ledger::FileRecord> newest;
  l.scan_files(f, [&](const ledger::FileRecord &r) {
    newest = r;
    return false;
  });
  if (newest) return *newest;
  std::string where = "owner " + owner + (prefix.empty() ? std::string(", no prefix") : ", prefix " + prefix);
  return Error(Errc::not_found, "no file with path '" + util::escape_for_terminal(ref.path) + "' (" + where +
                                    ") in " + l.location());
}

std::string shown_status(const ledger::FileRecord &r) {
  if (r.is_deleted && r.upload_status == ledger::FileStatus::active) return "DELETED";
  return ledger::to_string(r.upload_status);
}

Status require_active(const ledger::FileRecord &r) {
  using ledger::FileStatus;
  if (r.upload_status == FileStatus::active && !r.is_deleted) return ok_status();
  std::string why = r.upload_status == FileStatus::active      ? "it was deleted"
                    : r.upload_status == FileStatus::uploading ? "its upload has not finished (UPLOADING)"
                                                               : "its upload failed (UPLOAD_FAILED)";
  if (r.failure_reason) why += ": " + util::escape_for_terminal(*r.failure_reason);
  return Error(Errc::not_active, "file " + describe(r) + " is not ACTIVE: " + why);
}

std::vector<ledger::FileRecord> list_files(ledger::LedgerReports &l, const ledger::FileQuery &filter,
                                           const std::optional<std::string> &path_glob) {
  std::optional<match::Glob> glob;
  auto narrowed = filter;
  if (path_glob) {
    glob = match::Glob::compile(*path_glob);
    // An anchored glob's literal start ("/builds/7/**": "builds/7/") narrows the query.
    if (path_glob->size() > 1 && path_glob->front() == '/') {
      auto literal = path_glob->substr(1, path_glob->find_first_of("*?[{\\", 1) - 1);
      if (!literal.empty()) narrowed.path_prefix = literal;
    }
  }
  std::vector<ledger::FileRecord> rows;
  l.scan_files(narrowed, [&](const ledger::FileRecord &r) {
    if (!glob || glob->matches(r.relative_path)) rows.push_back(r);
    return true;
  });
  return rows;
}

namespace {
// Whether a is the newer of two rows restoring to one path (as find_by_path orders).
bool newer(const ledger::FileRecord &a, const ledger::FileRecord &b) {
  return std::tie(a.activated_at, a.id) > std::tie(b.activated_at, b.id);
}

// The newest row per restore path, from rows arriving in (relative_path, id) order, handed
// on in byte order of that path: each path's rows are adjacent, so only the current one is
// held. Rows with no relative path restore to their original name; they come first (''
// sorts first) and are held by name until the paths pass them (rows from before relative
// paths were recorded: few).
class NewestPerPath {
public:
  explicit NewestPerPath(const std::function<bool(const ledger::FileRecord &)> &visit) : m_visit(visit) {}

  // False once the visitor stopped.
  bool add(const ledger::FileRecord &r) {
    if (r.relative_path.empty()) {
      auto [it, fresh] = m_unnamed.try_emplace(r.original_name, r);
      if (!fresh && newer(r, it->second)) it->second = r;
      return true;
    }
    if (m_group && m_group->relative_path == r.relative_path) {
      if (newer(r, *m_group)) m_group = r;
      return true;
    }
    bool more = flush();
    m_group = r;
    return more;
  }

  // Hands on what is held. False when the visitor stopped.
  bool finish() {
    if (!flush()) return false;
    for (const auto &[name, r] : m_unnamed)
      if (!m_visit(r)) return false;
    m_unnamed.clear();
    return true;
  }

private:
  bool flush() {
    if (!m_group) return true;
    const ledger::FileRecord g = std::move(*m_group);
    m_group.reset();
    const auto &path = g.relative_path;
    while (!m_unnamed.empty() && m_unnamed.begin()->first < path) {
      if (!m_visit(m_unnamed.begin()->second)) return false;
      m_unnamed.erase(m_unnamed.begin());
    }
    if (!m_unnamed.empty() && m_unnamed.begin()->first == path) {
      auto r = std::move(m_unnamed.begin()->second);
      m_unnamed.erase(m_unnamed.begin());
      return m_visit(newer(r, g) ? r : g);
    }
    return m_visit(g);
  }

  const std::function<bool(const ledger::FileRecord &)> &m_visit;
  std::map<std::string, ledger::FileRecord> m_unnamed;
  std::optional<ledger::FileRecord> m_group;
};
} // namespace

void scan_active_under_prefix(ledger::LedgerReports &l, const std::string &owner, const std::string &prefix,
                              const std::function<bool(const ledger::FileRecord &)> &visit, int64_t page) {
  ledger::FileQuery f;
  f.owner = owner;
  f.run_prefix = prefix;
  f.sort = ledger::FileSort::path;
  f.limit = std::max<int64_t>(1, page);
  NewestPerPath newest(visit);
  std::vector<ledger::FileRecord> rows;
  for (;;) {
    rows.clear();
    l.scan_files(f, [&](const ledger::FileRecord &r) {
      rows.push_back(r);
      return true;
    });
    // The ledger's read is over: the visitor may take its time (a download) now.
    for (const auto &r : rows)
      if (r.upload_status == ledger::FileStatus::active && !r.is_deleted && !newest.add(r)) return;
    if (static_cast<int64_t>(rows.size()) < *f.limit) break;
    f.after = rows.back();
  }
  (void)newest.finish();
}

std::vector<ledger::FileRecord> active_under_prefix(ledger::LedgerReports &l, const std::string &owner,
                                                    const std::string &prefix) {
  std::vector<ledger::FileRecord> out;
  scan_active_under_prefix(l, owner, prefix, [&](const ledger::FileRecord &r) {
    out.push_back(r);
    return true;
  });
  return out;
}

nlohmann::json get_json(const GetResult &res, const ledger::FileRecord &r) {
  nlohmann::json j{{"file", res.file},        {"outcome", to_string(res.outcome)}, {"id", r.id},
                   {"path", restore_path(r)}, {"object_key", r.object_key},        {"sha256", r.sha256},
                   {"size", r.size}};
  if (res.error)
    j["error"] = {{"code", res.error->name()}, {"message", res.error->message}};
  else
    j["error"] = nullptr;
  return j;
}

nlohmann::json show_json(const ledger::FileRecord &r, const std::optional<ledger::TaskRecord> &t) {
  auto opt = [](const auto &v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  auto time = [](std::optional<int64_t> ms) {
    return ms ? nlohmann::json(util::format_rfc3339_ms(*ms)) : nlohmann::json(nullptr);
  };
  nlohmann::json j{{"id", r.id},
                   {"owner", r.owner_id},
                   {"name", r.original_name},
                   {"path", restore_path(r)},
                   {"prefix", r.run_prefix},
                   {"dedup_scope", ledger::to_string(r.dedup_scope)},
                   {"status", shown_status(r)},
                   {"upload_status", ledger::to_string(r.upload_status)},
                   {"deleted", r.is_deleted},
                   {"failure_reason", opt(r.failure_reason)},
                   {"policy", r.policy},
                   {"created_at", time(r.created_at)},
                   {"activated_at", time(r.activated_at)},
                   {"deleted_at", time(r.deleted_at)},
                   {"updated_at", time(r.updated_at)},
                   {"upload_deadline_at", time(r.upload_deadline_at)},
                   {"expires_at", time(r.expires_at)},
                   {"object_options", r.object_options.empty() ? nlohmann::json::object()
                                                               : nlohmann::json::parse(r.object_options)},
                   {"object_key", r.object_key},
                   {"shares", opt(r.content_of)},
                   {"size", r.size},
                   {"sha256", r.sha256},
                   {"media_type", r.media_type},
                   {"etag", opt(r.etag)},
                   {"version_id", opt(r.version_id)},
                   {"multipart_upload_id", opt(r.multipart_upload_id)},
                   {"idempotency_key", opt(r.idempotency_key)}};
  if (t)
    j["task"] = {{"id", t->id},
                 {"type", t->task_type},
                 {"status", ledger::to_string(t->status)},
                 {"retry_count", t->retry_count},
                 {"max_retries", t->max_retries},
                 {"next_retry_at", time(t->next_retry_at)},
                 {"lease_version", t->lease_version},
                 {"verify_pass", t->verify_pass},
                 {"last_error", opt(t->last_error)}};
  else
    j["task"] = nullptr;
  return j;
}

Status read_verified(store::ObjectStore &st, const ledger::FileRecord &r, const Sink &sink) {
  crypto::Sha256 h;
  uint64_t total = 0;
  const auto expected = static_cast<uint64_t>(r.size);
  bool too_long = false, sink_stopped = false;
  auto s = st.read(r.object_key, [&](const char *p, size_t n) {
    total += n;
    if (total > expected) {
      too_long = true;
      return false;
    }
    h.update(p, n);
    if (!sink(p, n)) {
      sink_stopped = true;
      return false;
    }
    return true;
  });
  auto mismatch = [&](const std::string &what) {
    return Error(Errc::content_mismatch, "file " + describe(r) + ", object " +
                                             util::escape_for_terminal(r.object_key) + ": " + what +
                                             ": the stored object is not the file the ledger recorded");
  };
  if (too_long)
    return mismatch("the object is longer than the " + std::to_string(expected) + " bytes recorded");
  if (sink_stopped) return Error(Errc::interrupted, "reading " + describe(r) + " was stopped");
  if (!s) return s.error();
  if (total != expected)
    return mismatch(std::to_string(total) + " bytes read, " + std::to_string(expected) + " recorded");
  auto got = crypto::to_hex(h.finish());
  if (got != r.sha256)
    return mismatch("SHA-256 of the bytes read is " + got + ", the ledger records " + r.sha256);
  return ok_status();
}

Result<Destination> open_destination(const std::string &output, bool many) {
  Destination d;
  if (output.empty()) {
    d.dir.reset(::open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!d.dir.valid()) return io_error("opening the current directory", errno);
    d.keep_paths = many;
    return d;
  }
  struct stat sb {};
  bool is_dir = ::stat(output.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode);
  if (is_dir || many || output.back() == '/') {
    if (!is_dir) {
      // mkdir -p of the directory the user named (its own components are theirs to choose).
      std::string partial;
      for (const auto &part : util::split(output, '/')) {
        partial += part;
        if (!part.empty() && ::mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST)
          return io_error("creating directory " + util::escape_for_terminal(partial), errno);
        partial += "/";
      }
    }
    d.dir.reset(::open(output.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!d.dir.valid()) return io_error("opening directory " + util::escape_for_terminal(output), errno);
    d.shown = output;
    d.keep_paths = true;
    return d;
  }
  auto slash = output.rfind('/');
  std::string parent = slash == std::string::npos ? "." : (slash == 0 ? "/" : output.substr(0, slash));
  d.file_name = slash == std::string::npos ? output : output.substr(slash + 1);
  if (d.file_name == "." || d.file_name == "..")
    return Error(Errc::usage, "-o " + util::escape_for_terminal(output) + ": not a file name");
  d.dir.reset(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.dir.valid()) return io_error("opening directory " + util::escape_for_terminal(parent), errno);
  d.shown = slash == std::string::npos ? "" : output.substr(0, slash + 1);
  return d;
}

const char *to_string(GetOutcome o) {
  switch (o) {
  case GetOutcome::written:
    return "written";
  case GetOutcome::skipped:
    return "skipped";
  case GetOutcome::failed:
    return "failed";
  }
  return "failed";
}

GetResult get_file(store::ObjectStore &st, const ledger::FileRecord &r, Destination &dest,
                   const GetOptions &opts) {
  GetResult res;
  auto fail = [&](Error e) {
    res.outcome = GetOutcome::failed;
    res.error = std::move(e);
    return res;
  };
  // Which directory and name: the relative path is sanitized in the ledger; check again.
  std::string rel = restore_path(r);
  std::vector<std::string> dirs;
  std::string name;
  if (!dest.file_name.empty()) {
    name = dest.file_name;
  } else {
    // The rule upload records paths by (ops/inspect): what it accepted is restored as is.
    if (auto why = relative_path_problem(rel))
      return fail(Error(Errc::bad_name,
                        "file " + describe(r) + ": its path cannot be restored: " + *why + "; not written"));
    auto parts = util::split(rel, '/');
    name = parts.back();
    if (dest.keep_paths) dirs.assign(parts.begin(), parts.end() - 1);
  }
  std::string shown_dir = dest.shown;
  for (const auto &d : dirs)
    shown_dir = join(shown_dir, d) + "/";
  res.file = util::escape_for_terminal(join(shown_dir, name)); // -o out: "out/c.txt", never "outc.txt"

  if (auto a = require_active(r); !a) return fail(a.error());
  auto dir = open_subdirs(dest.dir.get(), dirs, dest.shown);
  if (!dir) return fail(dir.error());
  int dfd = dir->get();

  // What is there already: an identical file is kept (no download); a different one is
  // replaced only with force; a directory never.
  struct stat sb {};
  if (::fstatat(dfd, name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(sb.st_mode))
      return fail(
          Error(Errc::output_exists, res.file + " is a directory; file " + describe(r) + " not written"));
    // A FIFO, a device node or a symlink is never replaced, --force or not (util::AtomicFile).
    if (!S_ISREG(sb.st_mode))
      return fail(Error(Errc::io_error, res.file + " is " + util::file_kind(sb.st_mode) +
                                            ", not a regular file; file " + describe(r) + " not written"));
    if (S_ISREG(sb.st_mode) && sb.st_size == r.size) {
      auto h = hash_existing(dfd, name, res.file);
      if (!h) return fail(h.error());
      if (h->first == r.sha256) {
        res.outcome = GetOutcome::skipped;
        return res;
      }
    }
    if (!opts.force)
      return fail(Error(Errc::output_exists, res.file + " exists and differs from file " + describe(r) +
                                                 "; not replaced (--force replaces it)"));
  } else if (errno != ENOENT) {
    return fail(io_error("checking " + res.file, errno));
  }

  // Beside the target in the directory opened above (no path resolved again), created
  // with the umask's mode like any file the user makes; without force, never published
  // over a file that appeared meanwhile.
  util::AtomicFile::Options o;
  o.mode = 0666;
  o.replace = opts.force;
  o.temp_prefix = ".lodge-get-";
  util::AtomicFile out(dfd, name, o);
  if (!out.open()) return fail(io_error("creating a temporary file beside " + res.file, out.error().err));
  bool write_failed = false;
  auto s = read_verified(st, r, [&](const char *p, size_t n) {
    if (opts.stop && opts.stop()) return false;
    write_failed = !out.write(std::string_view(p, n));
    return !write_failed;
  });
  if (write_failed) return fail(io_error("writing " + res.file, out.error().err));
  if (!s) return fail(s.error());
  if (!out.commit()) {
    const util::FileError &e = out.error();
    const std::string step = e.step;
    if (e.err == EEXIST && !opts.force)
      return fail(Error(Errc::output_exists, res.file + " appeared while file " + describe(r) +
                                                 " was being read; not replaced (--force replaces it)"));
    if (*e.found != '\0')
      return fail(Error(Errc::io_error, res.file + " is " + e.found + ", not a regular file; file " +
                                            describe(r) + " not written"));
    if (step == "rename") return fail(io_error("renaming the temporary file to " + res.file, e.err));
    if (step == "link") return fail(io_error("linking the temporary file to " + res.file, e.err));
    if (step == "fsync the directory") return fail(io_error("fsync of the directory of " + res.file, e.err));
    return fail(io_error("fsync of " + res.file, e.err));
  }
  res.outcome = GetOutcome::written;
  return res;
}

} // namespace lodge::ops
