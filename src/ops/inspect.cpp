#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <lodge/crypto/sha256.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/util/strings.hpp>
#include <magic.h>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace lodge::ops {

namespace {
// One code point of valid UTF-8 at s[i] (name_problem has checked the name is valid);
// returns its length.
size_t next_code_point(std::string_view s, size_t i, uint32_t &cp) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  cp = len == 1 ? b : b & (0x7F >> len);
  for (size_t k = 1; k < len && i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return len;
}
} // namespace

std::optional<std::string> name_problem(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return std::string("empty");
  if (name.size() > k_max_name_bytes) return "longer than " + std::to_string(k_max_name_bytes) + " bytes";
  if (name.find('\\') != std::string_view::npos)
    return std::string("contains a backslash (a path part on other systems)");
  // escape_for_terminal changes exactly the bytes that are control, bidi or invalid
  // UTF-8 (and doubles backslashes, excluded above): a name it leaves alone is clean.
  if (util::escape_for_terminal(name) != name)
    return std::string("contains control, bidi-override or invalid UTF-8 characters");
  // Unicode compatibility folding (NFKC, which some filesystems, archivers and servers apply)
  // must not turn the name into a path part: a separator, or a name of only dots.
  size_t dots = 0;
  bool only_dots = true;
  char buf[96];
  for (size_t i = 0; i < name.size();) {
    uint32_t cp = 0;
    i += next_code_point(name, i, cp);
    if (cp == 0xFF0F || cp == 0xFE68 ||
        cp == 0xFF3C) { // fullwidth solidus, small and fullwidth reverse solidus
      std::snprintf(buf, sizeof buf, "contains U+%04X, read as '/' or a backslash after Unicode folding", cp);
      return std::string(buf);
    }
    if (cp == '.' || cp == 0x2024 || cp == 0xFE52 ||
        cp == 0xFF0E) // full stop, one dot leader, small and fullwidth full stop
      dots += 1;
    else if (cp == 0x2025) // two dot leader
      dots += 2;
    else
      only_dots = false;
  }
  if (only_dots && dots <= 2) return std::string("read as '.' or '..' after Unicode folding");
  return std::nullopt;
}

Result<std::string> sanitize_display_name(std::string_view path) {
  auto slash = path.find_last_of('/');
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (auto why = name_problem(name))
    return Error(Errc::bad_name, "unusable file name '" + util::escape_for_terminal(name) + "': " + *why);
  return std::string(name);
}

std::optional<std::string> relative_path_problem(std::string_view path) {
  if (path.empty()) return std::string("it is empty");
  if (path.front() == '/') return std::string("it is absolute");
  for (const auto &seg : util::split(path, '/'))
    if (auto why = name_problem(seg))
      return "its component '" + util::escape_for_terminal(seg) + "' is " + *why;
  return std::nullopt;
}

Result<std::string> sanitize_relative_path(std::string_view path) {
  std::vector<std::string> parts;
  bool escapes = !path.empty() && path.front() == '/';
  for (auto &seg : util::split(path, '/')) {
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") escapes = true;
    parts.push_back(std::move(seg));
  }
  if (parts.empty()) return sanitize_display_name(path); // says why it is unusable
  if (escapes) parts.erase(parts.begin(), parts.end() - 1);
  std::string out;
  for (const auto &part : parts) {
    auto clean = sanitize_display_name(part);
    if (!clean) return clean.error();
    out += (out.empty() ? "" : "/") + clean.value();
  }
  return out;
}

std::string extension_of(std::string_view name) {
  auto dot = name.find_last_of('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 >= name.size()) return {};
  auto ext = name.substr(dot + 1);
  if (ext.size() > 16) return {};
  for (char c : ext)
    if (!std::isalnum(static_cast<unsigned char>(c))) return {};
  return util::to_lower(ext);
}

Status check_extension(const config::Policy &p, const std::string &ext) {
  if (p.extensions.empty()) return ok_status();
  if (std::find(p.extensions.begin(), p.extensions.end(), ext) != p.extensions.end()) return ok_status();
  std::string list;
  for (const auto &e : p.extensions)
    list += (list.empty() ? "" : ", ") + e;
  return Error(Errc::extension_not_allowed, "extension '" + (ext.empty() ? std::string("(none)") : ext) +
                                                "' is not allowed by policy " + p.name +
                                                " (allowed: " + list + ")");
}

namespace {
// Extensions that claim a specific kind of content, and the detected types that honour
// the claim. Extensions not listed claim nothing and match any content.
const std::map<std::string, std::set<std::string>> &claims() {
  static const std::map<std::string, std::set<std::string>> k{
      {"pdf", {"application/pdf"}},
      {"png", {"image/png"}},
      {"jpg", {"image/jpeg"}},
      {"jpeg", {"image/jpeg"}},
      {"gif", {"image/gif"}},
      {"webp", {"image/webp"}},
      {"tif", {"image/tiff"}},
      {"tiff", {"image/tiff"}},
      {"svg", {"image/svg+xml", "text/xml", "application/xml", "text/plain"}},
      {"doc", {"application/msword", "application/x-ole-storage", "application/CDFV2"}},
      {"xls", {"application/vnd.ms-excel", "application/x-ole-storage", "application/CDFV2"}},
      {"docx",
       {"application/vnd.openxmlformats-officedocument.wordprocessingml.document", "application/zip"}},
      {"xlsx", {"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "application/zip"}},
      {"pptx",
       {"application/vnd.openxmlformats-officedocument.presentationml.presentation", "application/zip"}},
      {"odt", {"application/vnd.oasis.opendocument.text", "application/zip"}},
      {"zip", {"application/zip"}},
      {"jar", {"application/java-archive", "application/zip"}},
      {"gz", {"application/gzip", "application/x-gzip"}},
      {"tgz", {"application/gzip", "application/x-gzip"}},
      {"bz2", {"application/x-bzip2"}},
      {"xz", {"application/x-xz"}},
      {"zst", {"application/zstd"}},
      {"7z", {"application/x-7z-compressed"}},
      {"tar", {"application/x-tar"}},
      {"mp3", {"audio/mpeg"}},
      {"mp4", {"video/mp4"}},
      {"wav", {"audio/x-wav", "audio/wav"}},
      {"exe", {"application/x-dosexec", "application/vnd.microsoft.portable-executable"}},
      {"txt", {"text/*", "application/json", "application/csv"}},
      {"md", {"text/*"}},
      {"csv", {"text/*", "application/csv"}},
      {"json", {"application/json", "text/plain"}},
      {"html", {"text/html", "text/plain", "text/xml"}},
      {"xml", {"text/xml", "application/xml", "text/plain"}},
  };
  return k;
}

bool matches(const std::set<std::string> &allowed, const std::string &type) {
  if (allowed.contains(type)) return true;
  auto slash = type.find('/');
  return slash != std::string::npos && allowed.contains(type.substr(0, slash) + "/*");
}
} // namespace

Status check_media_type(const config::Policy &p, const std::string &ext, const std::string &media_type) {
  // A spoofed name is the sharper diagnosis, so it is checked first.
  // An empty file holds nothing that could contradict its name (an empty notes.txt).
  bool empty = media_type == "application/x-empty" || media_type == "inode/x-empty";
  auto it = claims().find(ext);
  if (!empty && it != claims().end() && !matches(it->second, media_type))
    return Error(Errc::type_mismatch, "the name says ." + ext + " but the content is " + media_type);
  if (!p.media_types.empty() && std::find(p.media_types.begin(), p.media_types.end(),
                                          util::to_lower(media_type)) == p.media_types.end())
    return Error(Errc::type_not_allowed,
                 "content is " + media_type + ", which policy " + p.name + " does not allow");
  return ok_status();
}

std::map<std::string, std::string> parse_media_types(std::istream &in) {
  std::map<std::string, std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    auto hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string type;
    if (!(words >> type) || type.find('/') == std::string::npos) continue;
    type = util::to_lower(type);
    std::string ext;
    while (words >> ext)
      out.emplace(util::to_lower(ext),
                  type); // the first line naming an extension wins, as in Python's mimetypes
  }
  return out;
}

namespace {
const std::map<std::string, std::string> &system_media_types() {
  static const std::map<std::string, std::string> table = [] {
    std::ifstream in("/etc/mime.types");
    return in ? parse_media_types(in) : std::map<std::string, std::string>{};
  }();
  return table;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// Text a person could read and edit: text/*, and the application types that are text.
bool textual(std::string_view t) {
  static constexpr std::array<std::string_view, 17> k_text_apps{
      "application/json",   "application/javascript",  "application/ecmascript", "application/xml",
      "application/x-sh",   "application/x-csh",       "application/x-tex",      "application/x-latex",
      "application/rtf",    "application/sql",         "application/toml",       "application/yaml",
      "application/x-yaml", "application/x-httpd-php", "application/x-perl",     "application/x-ruby",
      "image/svg+xml"};
  return t.rfind("text/", 0) == 0 || ends_with(t, "+xml") || ends_with(t, "+json") ||
         std::find(k_text_apps.begin(), k_text_apps.end(), t) != k_text_apps.end();
}

std::string_view top_level(std::string_view t) {
  return t.substr(0, t.find('/'));
}
} // namespace

std::string content_type_for(const std::map<std::string, std::string> &table, const std::string &ext,
                             const std::string &detected) {
  auto it = ext.empty() ? table.end() : table.find(ext);
  if (it == table.end()) return detected;
  const std::string &named = it->second;
  if (named == detected) return named;
  // Detection with no opinion: unknown bytes, or none.
  if (detected == "application/octet-stream" || detected == "application/x-empty") return named;
  // Text either way: style.css detected text/plain is text/css.
  if (textual(detected) && textual(named)) return named;
  if (textual(detected) || textual(named)) return detected; // text named .png, or bytes named .css
  // A container the named format is built on (docx, jar and epub are zip; tgz is gzip).
  if ((detected == "application/zip" || detected == "application/gzip" || detected == "application/x-gzip") &&
      top_level(named) == "application")
    return named;
  // The same kind of thing under another name (image/x-ms-bmp and image/bmp).
  if (top_level(named) == top_level(detected) && top_level(named) != "application") return named;
  return detected;
}

std::string content_type_for(const std::string &ext, const std::string &detected) {
  return content_type_for(system_media_types(), ext, detected);
}

bool needs_libmagic(const config::Policy &p, const std::string &ext, const std::string &sniffed) {
  if (!p.media_types.empty()) return true;
  auto it = claims().find(ext);
  // A zip is a container: which kind (docx, odt, jar) only libmagic can say.
  return it != claims().end() && (sniffed == "application/zip" || !matches(it->second, sniffed));
}

namespace {
bool starts_with(const unsigned char *d, size_t n, size_t at, std::string_view sig) {
  return n >= at + sig.size() && std::memcmp(d + at, sig.data(), sig.size()) == 0;
}

// Bytes that do not occur in text (libmagic's view: NUL, most C0 controls, DEL); BEL,
// BS, TAB, LF, VT, FF, CR and ESC do.
bool binary_byte(unsigned char c) {
  if (c == 0x7f) return true;
  if (c >= 0x20) return false;
  return !(c == '\a' || c == '\b' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' ||
           c == 0x1b);
}

// Valid UTF-8 (a sequence cut by the end of the head is allowed) with no binary byte.
bool is_text(const unsigned char *d, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = d[i];
    if (c < 0x80) {
      if (binary_byte(c)) return false;
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1fU;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0fU;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07U;
    } else {
      return false;
    }
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= n) return i > 0; // cut by the end of the head: text so far
      if ((d[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d[i + k] & 0x3fU);
    }
    static constexpr std::array<uint32_t, 5> k_min{0, 0, 0x80, 0x800, 0x10000};
    if (cp < k_min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

std::string elf_type(const unsigned char *d, size_t n) {
  if (n < 18) return "application/x-executable";
  bool big = d[5] == 2;
  unsigned hi = big ? d[16] : d[17];
  unsigned lo = big ? d[17] : d[16];
  unsigned type = (hi << 8U) | lo;
  switch (type) {
  case 1:
    return "application/x-object";
  case 3:
    return "application/x-sharedlib";
  case 4:
    return "application/x-coredump";
  default:
    return "application/x-executable";
  }
}
} // namespace

std::string sniff_media_type(const char *data, size_t n) {
  if (n == 0) return "application/x-empty";
  const auto *d = reinterpret_cast<const unsigned char *>(data);
  using namespace std::string_view_literals;
  struct Signature {
    size_t at;
    std::string_view bytes;
    const char *type;
  };
  // Each signature as the format's specification gives its first bytes.
  static constexpr std::array<Signature, 18> k_signatures{{
      {0, "\x89PNG\r\n\x1a\n"sv, "image/png"},
      {0, "\xff\xd8\xff"sv, "image/jpeg"},
      {0, "GIF87a"sv, "image/gif"},
      {0, "GIF89a"sv, "image/gif"},
      {0, "II*\0"sv, "image/tiff"},
      {0, "MM\0*"sv, "image/tiff"},
      {0, "%PDF-"sv, "application/pdf"},
      {0, "\x1f\x8b"sv, "application/gzip"},
      {0, "PK\x03\x04"sv, "application/zip"},
      {0, "PK\x05\x06"sv, "application/zip"},
      {0, "PK\x07\x08"sv, "application/zip"},
      {0, "BZh"sv, "application/x-bzip2"},
      {0,
       "\xfd"
       "7zXZ\0"sv,
       "application/x-xz"},
      {0, "\x28\xb5\x2f\xfd"sv, "application/zstd"},
      {0, "7z\xbc\xaf\x27\x1c"sv, "application/x-7z-compressed"},
      {0, "\0asm"sv, "application/wasm"},
      {0,
       "\x7f"
       "ELF"sv,
       ""},                        // by e_type
      {8, "WEBP"sv, "image/webp"}, // after "RIFF" and a length
  }};
  for (const auto &s : k_signatures) {
    if (!starts_with(d, n, s.at, s.bytes)) continue;
    if (*s.type == '\0') return elf_type(d, n);
    if (s.at == 8 && !starts_with(d, n, 0, "RIFF")) continue;
    return s.type;
  }
  return is_text(d, n) ? "text/plain" : "application/octet-stream";
}

void MagicClose::operator()(magic_set *m) const noexcept {
  magic_close(m);
}

namespace {
// The compiled magic database, mapped read-only once for the process. libmagic's
// magic_load_buffers keeps pointers into the buffers (it does not copy them), so the
// mapping lives as long as the process. `usable` is false when the database is not all in
// compiled files (a text magic file with rules, as /etc/magic may hold): then every
// handle loads it the ordinary way.
struct MagicDatabase {
  std::vector<void *> buffers;
  std::vector<size_t> sizes;
  bool usable = false;
};

bool holds_rules(const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "re");
  if (!f) return false;
  char line[4096];
  bool rules = false;
  while (!rules && std::fgets(line, sizeof line, f)) {
    const char *c = line;
    while (*c == ' ' || *c == '\t')
      ++c;
    rules = *c != '\0' && *c != '\n' && *c != '#';
  }
  std::fclose(f);
  return rules;
}

bool map_file(const std::string &path, MagicDatabase &db) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  void *p = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return false;
  db.buffers.push_back(p);
  db.sizes.push_back(static_cast<size_t>(st.st_size));
  return true;
}

MagicDatabase map_database() {
  MagicDatabase db;
  const char *path = magic_getpath(nullptr, 0);
  if (!path) return db;
  for (const auto &entry : util::split(path, ':')) {
    if (entry.empty()) continue;
    bool compiled = entry.size() > 4 && entry.compare(entry.size() - 4, 4, ".mgc") == 0;
    if (compiled ? map_file(entry, db) : map_file(entry + ".mgc", db)) continue;
    struct stat st {};
    if (!compiled && ::stat(entry.c_str(), &st) == 0 && S_ISREG(st.st_mode) && holds_rules(entry)) return {};
  }
  db.usable = !db.buffers.empty();
  return db;
}

MagicDatabase &magic_database() {
  static MagicDatabase db = map_database();
  return db;
}
} // namespace

MediaTypeDetector::MediaTypeDetector() = default;

std::string MediaTypeDetector::detect(const char *data, size_t n) {
  if (n == 0) return "application/x-empty";
  if (!m_magic) {
    std::unique_ptr<magic_set, MagicClose> m(
        magic_open(MAGIC_MIME_TYPE | MAGIC_NO_CHECK_COMPRESS | MAGIC_ERROR));
    if (!m) throw LodgeError(Errc::internal, "magic_open failed");
    auto &db = magic_database();
    int rc = db.usable ? magic_load_buffers(m.get(), db.buffers.data(), db.sizes.data(), db.buffers.size())
                       : magic_load(m.get(), nullptr);
    if (rc != 0)
      throw LodgeError(Errc::internal,
                       std::string("cannot load the libmagic database: ") + magic_error(m.get()));
    m_magic = std::move(m);
  }
  const char *t = magic_buffer(m_magic.get(), data, n);
  return t ? t : "application/octet-stream";
}

Result<Digests> digest_file(int fd, uint64_t size, uint64_t part_size, size_t head_bytes,
                            std::vector<char> &buf, const std::function<void(uint64_t)> &on_read) {
  Digests d;
  crypto::Sha256 whole, part;
  // Up to 1 MiB a read, but no more than this file needs (at least 64 KiB): a worker's buffer
  // is zeroed and faulted in whole when it grows, and 256 workers of small files each holding
  // 1 MiB cost 256 MiB of page faults (a third of a run's CPU at 64 workers).
  constexpr uint64_t k_min_read = 64U << 10, k_max_read = 1U << 20;
  const auto need = static_cast<size_t>(std::clamp<uint64_t>(size, k_min_read, k_max_read));
  if (buf.size() < need) buf.resize(need);
  uint64_t done = 0;
  uint64_t in_part = 0;
  while (done < size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - done));
    if (part_size > 0) want = static_cast<size_t>(std::min<uint64_t>(want, part_size - in_part));
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error(Errc::unreadable, std::string("read failed: ") + std::strerror(errno));
    if (n == 0) return Error(Errc::file_changed, "the file shrank while it was being read");
    if (d.head.size() < head_bytes)
      d.head.append(buf.data(), std::min(static_cast<size_t>(n), head_bytes - d.head.size()));
    whole.update(buf.data(), static_cast<size_t>(n));
    done += static_cast<uint64_t>(n);
    if (on_read) on_read(static_cast<uint64_t>(n));
    if (part_size > 0) {
      part.update(buf.data(), static_cast<size_t>(n));
      in_part += static_cast<uint64_t>(n);
      if (in_part == part_size || done == size) {
        d.parts.push_back(crypto::to_hex(part.finish()));
        in_part = 0;
      }
    }
  }
  char probe = 0;
  if (::pread(fd, &probe, 1, static_cast<off_t>(size)) > 0)
    return Error(Errc::file_changed, "the file grew while it was being read");
  d.sha256 = crypto::to_hex(whole.finish());
  return d;
}

} // namespace lodge::ops
