// The walk of an upload's inputs (see lodge/ops/upload/walk.hpp).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <lodge/ops/inspect.hpp>
#include <lodge/ops/upload/walk.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <sys/stat.h>
#include <unistd.h>

namespace lodge::ops {

namespace {

struct Identity {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const Identity &) const = default;
};

Identity identity_of(const struct stat &st) {
  return {st.st_dev, st.st_ino};
}

std::optional<Identity> identity_at(const std::string &path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return identity_of(st);
}

struct DirCloser {
  void operator()(DIR *d) const { ::closedir(d); }
};

int64_t mtime_ms_of(const struct stat &st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
}

const char *kind_of(const struct stat &st) {
  return S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : "a device";
}

// One walk of the inputs. Directories are held open while their entries are in flight:
// every entry is reached as (parent fd, name), never by a path resolved again.
class Walker {
public:
  using Visit = std::function<bool(const InputFile &, const std::optional<Error> &)>;
  Walker(bool follow_symlinks, const WalkSkips &skip, const Visit &visit)
      : m_follow(follow_symlinks), m_visit(visit),
        m_filter(skip.filter.filter && skip.filter.filter->active() ? skip.filter.filter : nullptr),
        m_now_ms(skip.filter.now_ms) {
    if (!skip.ledger.empty()) {
      namespace fs = std::filesystem;
      fs::path db(skip.ledger);
      std::string base = db.filename().string();
      for (const char *suffix : {"", "-wal", "-shm", "-journal"}) {
        m_ledger_names.push_back(base + suffix);
        if (auto id = identity_at(skip.ledger + suffix)) m_ledger_files.push_back(*id);
      }
      m_ledger_dir = identity_at(db.has_parent_path() ? db.parent_path().string() : ".");
    }
    if (!skip.store_root.empty()) m_store_root = identity_at(skip.store_root);
  }

  bool top(const std::string &p) {
    InputFile as_given;
    as_given.path = p;
    as_given.name = p;
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      int e = errno;
      struct stat lst {};
      if (::lstat(p.c_str(), &lst) == 0)
        return m_visit(as_given, std::nullopt); // dangling link: upload says why
      return m_visit(as_given,
                     Error(Errc::unreadable, util::escape_for_terminal(p) + ": " + std::strerror(e)));
    }
    if (S_ISDIR(st.st_mode)) {
      if (skip_dir(p, identity_of(st))) return true;
      // A directory named on the command line is taken as given (a symlink to it too).
      util::Fd fd(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY));
      if (!fd.valid())
        return m_visit(as_given,
                       Error(Errc::unreadable, util::escape_for_terminal(p) + ": " + std::strerror(errno)));
      return enter(std::move(fd), p, identity_of(st), "");
    }
    if (S_ISREG(st.st_mode)) {
      namespace fs = std::filesystem;
      fs::path fp(p);
      auto parent = identity_at(fp.has_parent_path() ? fp.parent_path().string() : ".");
      if (skip_file(p, identity_of(st), parent, fp.filename().string())) return true;
      if (excluded_as_given(as_given, &st)) return m_visit(as_given, std::nullopt);
      as_given.has_identity = true;
      as_given.dev = st.st_dev;
      as_given.ino = st.st_ino;
      as_given.size = static_cast<uint64_t>(st.st_size);
      return m_visit(as_given, std::nullopt);
    }
    if (excluded_as_given(as_given, nullptr)) return m_visit(as_given, std::nullopt);
    return m_visit(as_given, Error(Errc::not_regular_file,
                                   util::escape_for_terminal(p) + " is " + kind_of(st) + "; skipped"));
  }

private:
  // A path as given is matched as the row would record it; one that cannot be recorded
  // is left to the upload, which says why.
  bool excluded_as_given(InputFile &f, const struct stat *regular) {
    if (!m_filter) return false;
    auto rel = sanitize_relative_path(f.path);
    if (!rel) return false;
    auto why = regular ? m_filter->file_exclusion(rel.value(), static_cast<uint64_t>(regular->st_size),
                                                  mtime_ms_of(*regular), m_now_ms)
                       : m_filter->path_exclusion(rel.value());
    if (!why) return false;
    f.excluded = *why;
    return true;
  }

  // What the filter says of an entry inside a directory walk (nullopt: taken).
  [[nodiscard]] std::optional<std::string> exclusion(const InputFile &f, const struct stat &st) const {
    if (!m_filter) return std::nullopt;
    if (S_ISDIR(st.st_mode)) return m_filter->dir_exclusion(f.relative_path);
    if (S_ISREG(st.st_mode))
      return m_filter->file_exclusion(f.relative_path, static_cast<uint64_t>(st.st_size), mtime_ms_of(st),
                                      m_now_ms);
    return m_filter->path_exclusion(f.relative_path);
  }

  // Whether the directory open at fd holds one of the filter's markers (--exclude-if-present):
  // as rclone's, an entry that is not a directory (a file, FIFO, device or link; with
  // --follow-symlinks a link to a directory is a directory), or a directory for "NAME/".
  [[nodiscard]] std::optional<std::string> marker_in(const util::Fd &fd) const {
    if (!m_filter || m_filter->marker_names().empty()) return std::nullopt;
    return m_filter->marker_exclusion([&](std::string_view name, bool want_dir) {
      std::string n(name);
      struct stat st {};
      bool found = (m_follow && ::fstatat(fd.get(), n.c_str(), &st, 0) == 0) ||
                   ::fstatat(fd.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
      return found && (S_ISDIR(st.st_mode) != 0) == want_dir;
    });
  }

  // Visits a directory left out as one entry, its names ending in '/'.
  bool visit_excluded_dir(const std::string &p, const std::string &rel, std::string why) {
    InputFile f;
    f.path = p + (p.empty() || p.back() == '/' ? "" : "/");
    f.name = f.path;
    f.relative_path = rel.empty() ? rel : rel + "/";
    f.excluded = std::move(why);
    return m_visit(f, std::nullopt);
  }

  static std::string join(const std::string &dir, const std::string &name) {
    return dir + (dir.empty() || dir.back() == '/' ? "" : "/") + name;
  }

  // Reports a skipped item once, however often the walk meets it.
  void say_once(Identity id, const std::string &message) {
    if (std::find(m_warned.begin(), m_warned.end(), id) != m_warned.end()) return;
    m_warned.push_back(id);
    util::log::warn(message);
  }

  bool skip_dir(const std::string &p, Identity id) {
    if (m_store_root && id == *m_store_root) {
      say_once(id, "skipping " + util::escape_for_terminal(p) + ": it is the store's own directory");
      return true;
    }
    return false;
  }

  bool skip_file(const std::string &p, Identity id, std::optional<Identity> parent, const std::string &name) {
    bool own = std::find(m_ledger_files.begin(), m_ledger_files.end(), id) != m_ledger_files.end() ||
               (parent && m_ledger_dir && *parent == *m_ledger_dir &&
                std::find(m_ledger_names.begin(), m_ledger_names.end(), name) != m_ledger_names.end());
    if (!own) return false;
    say_once(id, "skipping " + util::escape_for_terminal(p) + ": it is lodge's own ledger");
    return true;
  }

  // Lists the directory open at fd (which must be `id`) and visits its entries in order.
  // `rel`: the directory's path relative to the directory argument ("" for that one).
  bool enter(util::Fd fd, const std::string &p, Identity id, const std::string &rel) {
    auto fail = [&](const std::string &why) {
      InputFile f;
      f.path = p;
      f.name = p;
      return m_visit(f, Error(Errc::unreadable, util::escape_for_terminal(p) + ": " + why));
    };
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return fail(std::strerror(errno));
    if (identity_of(st) != id) {
      InputFile f;
      f.path = p;
      f.name = p;
      return m_visit(f, Error(Errc::file_changed,
                              util::escape_for_terminal(p) + " was replaced while it was walked; skipped"));
    }
    if (auto why = marker_in(fd)) return visit_excluded_dir(p, rel, std::move(*why));
    auto dir = std::make_shared<util::Fd>(std::move(fd));
    std::vector<std::string> names;
    {
      int listing = ::fcntl(dir->get(), F_DUPFD_CLOEXEC, 0);
      if (listing < 0) return fail(std::strerror(errno));
      std::unique_ptr<DIR, DirCloser> d(::fdopendir(listing));
      if (!d) {
        int e = errno;
        ::close(listing);
        return fail(std::strerror(e));
      }
      while (true) {
        errno = 0;
        const dirent *de = ::readdir(d.get());
        if (!de) {
          if (errno != 0) return fail(std::strerror(errno));
          break;
        }
        std::string n = de->d_name;
        if (n != "." && n != "..") names.push_back(std::move(n));
      }
    }
    std::sort(names.begin(), names.end());
    m_path.emplace_back(id, p);
    bool go_on = true;
    for (const auto &n : names)
      if (!(go_on = entry(dir, p, id, rel, n))) break;
    m_path.pop_back();
    return go_on;
  }

  bool entry(const std::shared_ptr<util::Fd> &dir, const std::string &dir_path, Identity dir_id,
             const std::string &dir_rel, const std::string &name) {
    InputFile f;
    f.path = join(dir_path, name);
    f.name = name;
    f.relative_path = dir_rel.empty() ? name : dir_rel + "/" + name;
    const std::string &p = f.path;
    struct stat st {};
    if (::fstatat(dir->get(), name.c_str(), &st, m_follow ? 0 : AT_SYMLINK_NOFOLLOW) != 0)
      return m_visit(f, Error(Errc::unreadable, util::escape_for_terminal(p) + ": " + std::strerror(errno)));
    // Before anything else: a directory left out is never opened.
    if (auto why = exclusion(f, st)) {
      if (S_ISDIR(st.st_mode)) return visit_excluded_dir(p, f.relative_path, std::move(*why));
      f.excluded = std::move(*why);
      return m_visit(f, std::nullopt);
    }
    if (S_ISLNK(st.st_mode)) {
      f.skipped = "a symbolic link, not followed (--follow-symlinks follows links)";
      return m_visit(f, std::nullopt);
    }
    Identity id = identity_of(st);
    if (S_ISDIR(st.st_mode)) {
      if (skip_dir(p, id)) return true;
      auto above = std::find_if(m_path.begin(), m_path.end(), [&](const auto &d) { return d.first == id; });
      if (above != m_path.end()) {
        say_once(id, "skipping " + util::escape_for_terminal(p) + ": a directory cycle (it leads back to " +
                         util::escape_for_terminal(above->second) + ")");
        return true;
      }
      int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY | (m_follow ? 0 : O_NOFOLLOW);
      util::Fd fd(::openat(dir->get(), name.c_str(), flags));
      if (!fd.valid()) {
        int e = errno;
        if (e == ELOOP || e == ENOTDIR)
          return m_visit(f, Error(Errc::file_changed, util::escape_for_terminal(p) +
                                                          " was replaced while it was walked; skipped"));
        return m_visit(f, Error(Errc::unreadable, util::escape_for_terminal(p) + ": " + std::strerror(e)));
      }
      return enter(std::move(fd), p, id, f.relative_path);
    }
    if (S_ISREG(st.st_mode)) {
      if (skip_file(p, id, dir_id, name)) return true;
      f.parent = dir;
      f.has_identity = true;
      f.dev = st.st_dev;
      f.ino = st.st_ino;
      f.size = static_cast<uint64_t>(st.st_size);
      return m_visit(f, std::nullopt);
    }
    return m_visit(
        f, Error(Errc::not_regular_file, util::escape_for_terminal(p) + " is " + kind_of(st) + "; skipped"));
  }

  bool m_follow;
  const Visit &m_visit;
  const match::Filter *m_filter; // null: everything is taken
  int64_t m_now_ms;
  std::vector<std::string> m_ledger_names;
  std::vector<Identity> m_ledger_files;
  std::optional<Identity> m_ledger_dir;
  std::optional<Identity> m_store_root;
  std::vector<std::pair<Identity, std::string>> m_path; // directories from this input down to here
  std::vector<Identity> m_warned;
};
} // namespace

void walk_inputs(const std::vector<std::string> &paths, bool follow_symlinks, const WalkSkips &skip,
                 const std::function<bool(const InputFile &, const std::optional<Error> &)> &visit) {
  Walker w(follow_symlinks, skip, visit);
  for (const auto &p : paths)
    if (!w.top(p)) return;
}

} // namespace lodge::ops
